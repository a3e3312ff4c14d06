// Package jepsen checks histories of a Jepsen-style test of a partitioned,
// replicated log (docs/architecture.md §9.1): what producers sent and were
// told, what consumers read, the high watermarks observed, the final log of
// every partition read after the faults healed, and each replica's local
// copy of it.
//
// Check runs two kinds of checks over a History.
//
//   - Linearizability, with porcupine (github.com/anishathalye/porcupine
//     v1.3.1) and a model of one partition's log: append(value) returns the
//     offset the value got, read(offset) returns the value there or
//     "not yet" when the log is shorter, and the final read returns the
//     whole log. Each partition is checked on its own, from the log it held
//     at the start of the history (History.Init). A produce whose outcome
//     is unknown (StatusInfo) may take effect at any time after its call,
//     or never; if it did, at the offset where the final log holds its
//     value. So every append has an offset, which fixes its place among
//     the appends, and porcupine decides a history of thousands of
//     operations in well under a second when it is linearizable. On one
//     that is not, the search may take exponential time: a search cut
//     short (Options.Timeout) is a violation too.
//   - Direct checks, each naming the operations at fault: no acknowledged
//     record lost (every successful produce is in the final log at its
//     offset), no value twice in the logs, no value from a produce that
//     definitely failed, the final log extends the initial one, every
//     replica holds the final log's value at each offset below the high
//     watermark (one value per offset across every replica), no observer
//     sees a partition's high watermark move back or pass the final log's
//     end, every consumer's reads of a partition within one assignment
//     are at consecutive offsets and match the final log, and no
//     acknowledgement or read of an offset returned before the append of
//     that offset or a lower one was invoked (a necessary condition of
//     linearizability, which names the operations at once where
//     porcupine's search of a long history may not end).
//
// A test that runs in rounds checks one History per round: Init is the
// previous round's final log, History.Pending the produces of earlier
// rounds whose outcome is still unknown (Result.Pending), and
// History.Resume where each consumer's reads go on (Result.Resume).
package jepsen
