package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/api/batch"
	"github.com/seedqueue/sq/sdk"
)

// partitionRun is the idempotent producer identity of the batches `sq
// produce -p` builds itself (the producer stamps its own): the id and
// epoch the server granted at the first batch and the sequence of the
// next batch. The run ends with the first failed batch, as the command
// does.
type partitionRun struct {
	asked bool  // InitProducerID was called
	id    int64 // -1: the server grants no ids; batches carry none
	epoch int16
	seq   int32
}

// stamp makes b's batch the run's next one, asking c (the partition's
// leader, as the SDK's producer asks: any node grants ids) for an identity
// first at the first batch (retrying a retriable failure as a publish is,
// within ctx). A server that does not grant ids
// (INVALID_REQUEST, UNSUPPORTED_VERSION) leaves the batches unstamped,
// with one warning on w.
func (r *partitionRun) stamp(ctx context.Context, c *sdk.Client, b *batch.Builder, w io.Writer) error {
	if !r.asked {
		id, epoch, err := c.InitProducerID(ctx)
		wait := sdk.DefaultRetryBackoff
		for attempt := 0; err != nil && sdk.IsRetriable(err) && attempt < sdk.DefaultRetries; attempt++ {
			// NO_QUORUM while a cluster elects its controller, say.
			if sleepCtx(ctx, wait) != nil {
				break
			}
			wait = min(2*wait, sdk.DefaultRetryBackoffMax)
			id, epoch, err = c.InitProducerID(ctx)
		}
		switch {
		case errors.Is(err, api.ErrInvalidRequest) || errors.Is(err, api.ErrUnsupportedVersion):
			fmt.Fprintf(w, "sq: warning: %s does not grant idempotent producer ids; a batch retried after a lost acknowledgement may be stored twice\n", c.Addr())
			id = -1
		case err != nil:
			return err
		}
		r.asked, r.id, r.epoch = true, id, epoch
	}
	if r.id < 0 {
		return nil
	}
	b.SetProducer(r.id, r.epoch, r.seq)
	r.seq = int32((int64(r.seq) + int64(b.Len())) % (1 << 31))
	return nil
}
