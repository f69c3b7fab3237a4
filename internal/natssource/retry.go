package natssource

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Retry runs op until it succeeds, fails for good, or ctx ends. An
// attempt fails for good unless its error is Transient; then op runs
// again after a short pause. In a cluster, a request to a stream whose
// leader died is answered by nobody until a new one is elected (seconds):
// so each request op makes is bounded on its own, by the JetStream
// client's default timeout (5 s), not by ctx's deadline, which would make
// the first request wait for the whole of it. op must be safe to repeat
// (every Publisher method is: a repeated publish finds its earlier
// attempt committed, or rewrites what it left half done).
func Retry(ctx context.Context, op func(context.Context) error) error {
	pause := 100 * time.Millisecond
	for n := 1; ; n++ {
		err := op(perRequest{ctx})
		if err == nil {
			return nil
		}
		if !Transient(err) {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (after %d attempts: %w)", err, n, ctx.Err())
		case <-time.After(pause):
		}
		pause = min(2*pause, 2*time.Second)
	}
}

// perRequest is a context that ends with its parent but reports no
// deadline: the jetstream package then bounds each request by its default
// timeout.
type perRequest struct{ context.Context }

func (perRequest) Deadline() (time.Time, bool) { return time.Time{}, false }

// Transient reports an error that another attempt may not meet: no
// answer in time (no stream leader to answer), a connection being
// reestablished, a leader that changed, or JetStream answering that its
// cluster is not available for now (503). "No responders" is not: a
// server without JetStream says it at once, and says it again.
func Transient(err error) bool {
	switch {
	case errors.Is(err, context.DeadlineExceeded),
		errors.Is(err, nats.ErrTimeout),
		errors.Is(err, nats.ErrConnectionReconnecting),
		errors.Is(err, nats.ErrDisconnected),
		errors.Is(err, jetstream.ErrNoStreamResponse),
		errors.Is(err, jetstream.ErrAsyncPublishTimeout),
		errors.Is(err, jetstream.ErrConsumerLeadershipChanged):
		return true
	}
	var api *jetstream.APIError
	return errors.As(err, &api) && api.Code == 503
}
