package tier

import (
	"context"
	"errors"

	"github.com/seedqueue/sq/api"
)

// Fetch implements engine.RemoteLog: whole batches of the partition's
// remote log from offset (or, in a gap, from the next offset it holds),
// read through the archiver's RemoteReader. Errors: OFFSET_OUT_OF_RANGE
// (with the remote log's range) when the partition has no remote data at
// offset, STORAGE_ERROR for a damaged object, or the reader's errors
// (ErrRemoteTimeout, the store's).
func (a *Archiver) Fetch(ctx context.Context, topic string, id api.TopicID, partition int, offset uint64, maxBytes int) ([][]byte, error) {
	m := a.Manifest(topic, id, partition)
	if m == nil || len(m.Segments) == 0 || a.o.Reader == nil {
		return nil, api.NewError(api.CodeOffsetOutOfRange, "%s/%d has no remote log", topic, partition)
	}
	res, err := a.o.Reader.Read(ctx, m, offset, maxBytes)
	switch {
	case errors.Is(err, ErrOffsetBeyondRemote):
		start, end, _ := a.Bounds(topic, id, partition)
		return nil, api.NewRangeError(api.CodeOffsetOutOfRange, start, end, "offset %d beyond the remote log [%d, %d) of %s/%d", offset, start, end, topic, partition)
	case errors.Is(err, ErrCorrupt):
		return nil, api.WrapError(api.CodeStorageError, err, "remote log of %s/%d", topic, partition)
	case err != nil:
		return nil, err
	}
	return [][]byte{res.Batches}, nil
}
