// Package ratelog limits repeated log lines: a slog.Handler that lets the
// first record of a kind through, drops the repeats for a window, and then
// logs the last of them once with the count it dropped (suppressed=N).
//
// A record's kind is its level, its message and the values of a few key
// attributes (topic, partition, group, file, path, dir, data_dir by
// default), from
// the record or bound with Logger.With. So a disk that fills up logs one
// line per partition every Window however many publishes it refuses, while
// a different message, or the same message about another partition, is
// logged at once. Records below MinLevel (INFO and DEBUG by default) pass
// through untouched.
//
// Per kind: the first record is logged and opens a window. Repeats within
// the window are counted, not logged. When the window ends, if any were
// dropped, the last one is logged with the attribute suppressed=N (N the
// records dropped in that window, that line standing for them) and a new
// window opens; if none were, the kind is forgotten and its next record is
// logged at once. Steadily repeated records thus come out as one line per
// Window. Handler.Flush logs every pending count at once (at shutdown).
//
// Time is read with time.Now and windows end with time.AfterFunc, so tests
// drive it with testing/synctest.
package ratelog
