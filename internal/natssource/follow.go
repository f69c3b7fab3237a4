package natssource

import (
	"fmt"
	"runtime/debug"
	"strings"

	"github.com/nats-io/nats.go"
)

// entry is one message of a bucket: a key's value, or its deletion.
type entry struct {
	key     string
	rev     uint64
	deleted bool
	value   []byte
	pending uint64 // messages after this one, as the server counted them
}

// follower reads a bucket in revision order, every value its history
// keeps, through an ordered push consumer.
//
// The roster bucket is read without a subject filter (its stream holds
// only its keys): with one, nats-server 2.9 counts a new consumer's
// pending messages subject by subject, and a thousand watchers of a
// 100,000-name bucket took minutes to start, each creation tens of
// seconds (the KV watch of nats.go filters on "$KV.<bucket>.>").
type follower struct {
	sub     *nats.Subscription
	c       chan entry
	done    chan struct{}
	failedC chan *panicError // the handler panicked: a message is lost
}

// follow starts reading bucket after revision after (0: from the start);
// key, when set, is the one key read.
func follow(nc *nats.Conn, bucket, key string, after uint64) (*follower, error) {
	js, err := nc.JetStream()
	if err != nil {
		return nil, err
	}
	f := &follower{c: make(chan entry, 256), done: make(chan struct{}), failedC: make(chan *panicError, 1)}
	prefix := "$KV." + bucket + "."
	subject := ""
	if key != "" {
		subject = prefix + key
	}
	opts := []nats.SubOpt{nats.BindStream("KV_" + bucket), nats.OrderedConsumer()}
	if after > 0 {
		opts = append(opts, nats.StartSequence(after+1))
	} else {
		opts = append(opts, nats.DeliverAll())
	}
	f.sub, err = js.Subscribe(subject, func(m *nats.Msg) {
		// nats.go runs this on a goroutine of its own, which nothing
		// recovers: a panic here would end the process. Recovered, the
		// message is lost: the session reads everything again (see
		// Watcher.recovered).
		defer func() {
			if v := recover(); v != nil {
				select {
				case f.failedC <- &panicError{in: "reading bucket " + bucket, v: v, stack: debug.Stack()}:
				default:
				}
			}
		}()
		md, err := m.Metadata()
		if err != nil {
			return
		}
		e := entry{key: strings.TrimPrefix(m.Subject, prefix), rev: md.Sequence.Stream, value: m.Data, pending: md.NumPending}
		switch m.Header.Get("KV-Operation") {
		case "DEL", "PURGE":
			e.deleted = true
		}
		select {
		case f.c <- e:
		case <-f.done:
		}
	}, opts...)
	if err != nil {
		return nil, fmt.Errorf("reading bucket %s: %w", bucket, err)
	}
	return f, nil
}

// entries delivers the bucket's messages in order.
func (f *follower) entries() <-chan entry { return f.c }

// failed delivers the handler's panic, recovered (the first only).
func (f *follower) failed() <-chan *panicError { return f.failedC }

// valid reports whether the subscription still runs (nats.go may give up
// on an ordered consumer it cannot recreate).
func (f *follower) valid() bool { return f.sub.IsValid() }

func (f *follower) stop() {
	close(f.done)
	f.sub.Unsubscribe()
}
