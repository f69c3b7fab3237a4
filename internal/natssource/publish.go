package natssource

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/meshhost/meshhost/internal/admit"
	"github.com/meshhost/meshhost/spec"
)

// ErrStale is returned for a generation that is not newer than the one
// committed (or a commit that lost a race with another writer).
var ErrStale = errors.New("generations never go backwards")

// ErrNotClean is returned by PublishDelta when the roster bucket holds
// writes no commit covers (a publisher stopped half-way): only a whole
// roster (PublishRoster) can say what those names should be.
var ErrNotClean = errors.New("the roster bucket holds uncommitted writes; publish the whole roster")

// Publisher writes rosters and declarations into the buckets: what a
// controller calls.
type Publisher struct {
	js     jetstream.JetStream
	layout Layout
}

// NewPublisher returns a Publisher writing through nc.
func NewPublisher(nc *nats.Conn, layout Layout) (*Publisher, error) {
	if layout == (Layout{}) {
		layout = LayoutFor(DefaultPrefix)
	}
	if err := layout.validate(); err != nil {
		return nil, err
	}
	// Acknowledgements lost with a server that died are given up on after
	// the timeout, so a later publish does not wait for them.
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(4096), jetstream.WithPublishAsyncTimeout(30*time.Second))
	if err != nil {
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	return &Publisher{js: js, layout: layout}, nil
}

// EnsureBuckets creates the buckets when they do not exist (file storage,
// History values per key, one replica).
func (p *Publisher) EnsureBuckets(ctx context.Context) error {
	return p.EnsureReplicatedBuckets(ctx, 1)
}

// EnsureReplicatedBuckets creates the buckets when they do not exist, as
// EnsureBuckets, each stored on replicas servers of a JetStream cluster
// (3 or 5 keep every acknowledged write when one or two servers die). A
// bucket that exists keeps its replicas.
func (p *Publisher) EnsureReplicatedBuckets(ctx context.Context, replicas int) error {
	if replicas < 1 {
		return fmt.Errorf("bucket replicas %d: want 1 or more", replicas)
	}
	for _, b := range []string{p.layout.Roster, p.layout.Machines} {
		_, err := p.js.KeyValue(ctx, b)
		if err == nil {
			continue
		}
		if !errors.Is(err, jetstream.ErrBucketNotFound) {
			return fmt.Errorf("opening bucket %s: %w", b, err)
		}
		_, err = p.js.CreateKeyValue(ctx, jetstream.KeyValueConfig{
			Bucket: b, History: History, Storage: jetstream.FileStorage, Replicas: replicas,
			Description: "meshhost: see the natssource package documentation",
		})
		if err != nil && !errors.Is(err, jetstream.ErrBucketExists) {
			return fmt.Errorf("creating bucket %s: %w", b, err)
		}
	}
	return nil
}

// Result is what a publish wrote.
type Result struct {
	Generation uint64 `json:"generation"` // committed now
	Previous   uint64 `json:"previous"`   // committed before (0: none)
	Set        int    `json:"set"`        // names written (added or changed)
	Removed    int    `json:"removed"`    // names deleted
	Names      int    `json:"names"`      // names in the roster now
	Revision   uint64 `json:"revision"`   // the commit's Revision
	Unchanged  bool   `json:"unchanged"`  // this generation was committed already, with this roster
	Bytes      int    `json:"bytes"`      // payload bytes written (values and commit record)
}

// current is the roster bucket as a publisher reads it: every key's newest
// value, committed or not.
type current struct {
	names     map[string]currentName
	last      uint64 // the newest revision of any name key
	commit    *Commit
	commitRev uint64 // 0: no commit record
}

type currentName struct {
	addrs   []netip.Addr // nil: deleted, or not a valid value
	valid   bool
	deleted bool
}

// read reads every key's newest value.
func (p *Publisher) read(ctx context.Context, kv jetstream.KeyValue) (*current, error) {
	w, err := kv.WatchAll(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading bucket %s: %w", p.layout.Roster, err)
	}
	defer w.Stop()
	cur := &current{names: map[string]currentName{}}
	for {
		var e jetstream.KeyValueEntry
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("reading bucket %s: %w", p.layout.Roster, ctx.Err())
		case e = <-w.Updates():
		}
		if e == nil {
			return cur, nil
		}
		if e.Key() == CommitKey {
			if e.Operation() == jetstream.KeyValuePut {
				c, err := parseCommit(e.Value())
				if err != nil {
					return nil, fmt.Errorf("the commit record in bucket %s: %w", p.layout.Roster, err)
				}
				cur.commit, cur.commitRev = &c, e.Revision()
			}
			continue
		}
		name, ok := nameOf(e.Key())
		if !ok {
			continue
		}
		cur.last = max(cur.last, e.Revision())
		if e.Operation() != jetstream.KeyValuePut {
			cur.names[name] = currentName{deleted: true}
			continue
		}
		addrs, err := decodeName(name, e.Value())
		cur.names[name] = currentName{addrs: addrs, valid: err == nil}
	}
}

// PublishRoster makes the roster bucket hold r and commits it: it reads
// what the bucket holds, writes only the names that differ (whatever
// wrote them), then writes the commit record with compare-and-set. r must
// be valid and normalized (as specjson.ParseRoster returns it). A generation
// not newer than the one committed is refused with ErrStale, unless it is
// the same roster committed already (a retry), which changes nothing.
func (p *Publisher) PublishRoster(ctx context.Context, r *spec.Roster) (Result, error) {
	if err := r.Validate(); err != nil {
		return Result{}, err
	}
	kv, err := p.js.KeyValue(ctx, p.layout.Roster)
	if err != nil {
		return Result{}, fmt.Errorf("opening bucket %s: %w", p.layout.Roster, err)
	}
	cur, err := p.read(ctx, kv)
	if err != nil {
		return Result{}, err
	}
	sum := rosterDigest(r.Names)
	res := Result{Generation: r.Generation, Names: len(r.Names)}
	if c := cur.commit; c != nil {
		res.Previous = c.Generation
		// Judged as the resolver judges a roster against the one it
		// serves (admit.ServedRoster); the committed one is known by its
		// digest.
		dec := admit.ServedRoster("roster", r, c.Generation, func() []string {
			if c.Digest == sum.String() && c.Names == len(r.Names) && slices.Equal(c.Zones, zonesOf(r)) {
				return nil
			}
			return []string{"its names, zones or digest differ from the committed one"}
		})
		switch dec.Verdict {
		case admit.Same:
			res.Unchanged, res.Revision = true, c.Revision
			return res, nil
		case admit.Refused:
			return res, fmt.Errorf("roster generation %d: generation %d is committed (%s): %w", r.Generation, c.Generation, dec.Reason, ErrStale)
		}
	}
	var writes []write
	for name, addrs := range r.Names {
		if c, ok := cur.names[name]; ok && c.valid && slices.Equal(c.addrs, addrs) {
			continue
		}
		writes = append(writes, write{name: name, addrs: addrs})
		res.Set++
	}
	for name, c := range cur.names {
		if _, keep := r.Names[name]; keep || c.deleted {
			continue
		}
		writes = append(writes, write{name: name})
		res.Removed++
	}
	through, n, err := p.write(ctx, writes)
	res.Bytes += n
	if err != nil {
		return res, err
	}
	res.Revision = max(through, cur.last)
	if cur.commit != nil {
		res.Revision = max(res.Revision, cur.commit.Revision)
	}
	n, err = p.commit(ctx, kv, Commit{Version: ProtocolVersion, Generation: r.Generation, Revision: res.Revision,
		Names: len(r.Names), Digest: sum.String(), Zones: zonesOf(r)}, cur.commitRev)
	res.Bytes += n
	return res, err
}

func zonesOf(r *spec.Roster) []string {
	if r.Zones == nil {
		return []string{}
	}
	return r.Zones
}

// Delta is a change to the committed roster, for PublishDelta.
type Delta struct {
	Generation uint64
	Set        map[string][]netip.Addr // names added or changed
	Removed    []string
	Zones      []string // nil: unchanged
}

// PublishDelta commits a change of k names in time proportional to k: it
// reads the commit record and the k names, checks that the bucket holds
// nothing uncommitted (ErrNotClean otherwise), writes the k names and
// commits with compare-and-set. What a controller that knows what changed
// calls; PublishRoster is for anything else.
func (p *Publisher) PublishDelta(ctx context.Context, d Delta) (Result, error) {
	kv, err := p.js.KeyValue(ctx, p.layout.Roster)
	if err != nil {
		return Result{}, fmt.Errorf("opening bucket %s: %w", p.layout.Roster, err)
	}
	ce, err := kv.Get(ctx, CommitKey)
	if err != nil {
		return Result{}, fmt.Errorf("reading the commit record: %w", err)
	}
	c, err := parseCommit(ce.Value())
	if err != nil {
		return Result{}, err
	}
	res := Result{Generation: d.Generation, Previous: c.Generation}
	if d.Generation <= c.Generation {
		return res, fmt.Errorf("roster generation %d: generation %d is committed: %w", d.Generation, c.Generation, ErrStale)
	}
	st, err := kv.Status(ctx)
	if err != nil {
		return res, fmt.Errorf("reading the status of bucket %s: %w", p.layout.Roster, err)
	}
	if last := st.(*jetstream.KeyValueBucketStatus).StreamInfo().State.LastSeq; last != ce.Revision() {
		return res, fmt.Errorf("the bucket is at revision %d, its commit record at %d: %w", last, ce.Revision(), ErrNotClean)
	}
	sum, err := parseDigest(c.Digest)
	if err != nil {
		return res, err
	}
	n := c.Names
	var writes []write
	old := func(name string) ([]netip.Addr, error) {
		e, err := kv.Get(ctx, NameKey(name))
		if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", name, err)
		}
		return decodeName(name, e.Value())
	}
	for name, addrs := range d.Set {
		if err := spec.CheckName(name); err != nil || name != spec.CanonicalName(name) {
			return res, &spec.FieldError{Path: fmt.Sprintf("names[%q]", name), Reason: "not a canonical host name"}
		}
		if err := (&spec.Roster{Generation: 1, Names: map[string][]netip.Addr{name: addrs}}).Validate(); err != nil {
			return res, err
		}
		addrs = slices.SortedFunc(slices.Values(addrs), netip.Addr.Compare)
		prev, err := old(name)
		if err != nil {
			return res, err
		}
		if prev != nil {
			if slices.Equal(prev, addrs) {
				continue
			}
			sum.toggle(entryDigest(name, prev))
			n--
		}
		sum.toggle(entryDigest(name, addrs))
		n++
		writes = append(writes, write{name: name, addrs: addrs})
		res.Set++
	}
	for _, name := range d.Removed {
		if _, both := d.Set[name]; both {
			return res, fmt.Errorf("%s is both set and removed", name)
		}
		prev, err := old(name)
		if err != nil {
			return res, err
		}
		if prev == nil {
			continue
		}
		sum.toggle(entryDigest(name, prev))
		n--
		writes = append(writes, write{name: name})
		res.Removed++
	}
	zones := c.Zones
	if d.Zones != nil {
		zr := &spec.Roster{Generation: 1, Zones: d.Zones}
		if err := zr.Validate(); err != nil {
			return res, err
		}
		zones = zr.Normalize().Zones
		if zones == nil {
			zones = []string{}
		}
	}
	through, nb, err := p.write(ctx, writes)
	res.Bytes += nb
	if err != nil {
		return res, err
	}
	res.Revision, res.Names = max(through, c.Revision), n
	nb, err = p.commit(ctx, kv, Commit{Version: ProtocolVersion, Generation: d.Generation, Revision: res.Revision,
		Names: n, Digest: sum.String(), Zones: zones}, ce.Revision())
	res.Bytes += nb
	return res, err
}

// write is one name key to write: its addresses, or a deletion (nil).
type write struct {
	name  string
	addrs []netip.Addr
}

// write writes the name keys, pipelined, and returns the newest revision
// written and the payload bytes.
func (p *Publisher) write(ctx context.Context, writes []write) (through uint64, bytes int, err error) {
	if len(writes) == 0 {
		return 0, 0, nil
	}
	msg := func(w write) *nats.Msg {
		m := &nats.Msg{Subject: "$KV." + p.layout.Roster + "." + NameKey(w.name), Header: nats.Header{}}
		if w.addrs == nil {
			m.Header.Set("KV-Operation", "DEL")
		} else {
			m.Data = encodeAddrs(w.addrs)
		}
		bytes += len(m.Data)
		return m
	}
	if len(writes) <= 8 {
		// A few names: one after the other, each acknowledged.
		for _, w := range writes {
			ack, err := p.js.PublishMsg(ctx, msg(w))
			if err != nil {
				return 0, bytes, fmt.Errorf("writing %s: %w; nothing was committed", w.name, err)
			}
			through = max(through, ack.Sequence)
		}
		return through, bytes, nil
	}
	// Many: pipelined.
	futures := make([]jetstream.PubAckFuture, 0, len(writes))
	for _, w := range writes {
		f, err := p.js.PublishMsgAsync(msg(w))
		if err != nil {
			return 0, bytes, fmt.Errorf("writing %s: %w; nothing was committed", w.name, err)
		}
		futures = append(futures, f)
	}
	for i, f := range futures {
		select {
		case ack := <-f.Ok():
			through = max(through, ack.Sequence)
		case err := <-f.Err():
			return 0, bytes, fmt.Errorf("writing %s: %w; nothing was committed", writes[i].name, err)
		case <-ctx.Done():
			return 0, bytes, fmt.Errorf("writing names: %w; nothing was committed", ctx.Err())
		}
	}
	return through, bytes, nil
}

// commit writes the commit record with compare-and-set on the revision of
// the record it replaces (0: there is none).
func (p *Publisher) commit(ctx context.Context, kv jetstream.KeyValue, c Commit, prev uint64) (int, error) {
	data, err := json.Marshal(c)
	if err != nil {
		return 0, err
	}
	if prev == 0 {
		_, err = kv.Create(ctx, CommitKey, data)
	} else {
		_, err = kv.Update(ctx, CommitKey, data, prev)
	}
	if errors.Is(err, jetstream.ErrKeyExists) {
		return len(data), fmt.Errorf("committing roster generation %d: another writer committed first: %w", c.Generation, ErrStale)
	}
	if err != nil {
		return len(data), fmt.Errorf("committing roster generation %d: %w", c.Generation, err)
	}
	return len(data), nil
}

// PublishDeclaration writes the machine's declaration, without its
// roster, with compare-and-set; a generation not newer than the one in the
// bucket is refused with ErrStale (the same one again changes nothing).
func (p *Publisher) PublishDeclaration(ctx context.Context, d *spec.Declaration) (uint64, error) {
	if err := d.Validate(); err != nil {
		return 0, err
	}
	kv, err := p.js.KeyValue(ctx, p.layout.Machines)
	if err != nil {
		return 0, fmt.Errorf("opening bucket %s: %w", p.layout.Machines, err)
	}
	doc := *d
	doc.Roster = nil
	full, err := doc.MarshalJSON()
	if err != nil {
		return 0, err
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(full, &top); err != nil {
		return 0, err
	}
	delete(top, "roster")
	data, err := json.Marshal(top)
	if err != nil {
		return 0, err
	}
	var prev uint64
	e, err := kv.Get(ctx, d.Machine)
	switch {
	case err == nil:
		prev = e.Revision()
		old, perr := parseMachineDeclaration(e.Value())
		mine, merr := parseMachineDeclaration(data) // both sides parsed alike
		if perr == nil && merr == nil {
			// Judged as the agent judges it (admit.Contents): the same
			// again is idempotent, other content is generation_reused.
			switch dec := admit.Contents(mine, old); {
			case dec.Verdict == admit.Same:
				return prev, nil
			case dec.Reason == admit.GenerationReused:
				return 0, fmt.Errorf("declaration of %s generation %d: generation %d is in the bucket with other content (generation_reused); publish the change under a newer generation: %w", d.Machine, d.Generation, old.Generation, ErrStale)
			case dec.Verdict == admit.Refused:
				return 0, fmt.Errorf("declaration of %s generation %d: generation %d is in the bucket (%s): %w", d.Machine, d.Generation, old.Generation, dec.Reason, ErrStale)
			}
		}
	case errors.Is(err, jetstream.ErrKeyNotFound), errors.Is(err, jetstream.ErrKeyDeleted):
		// first
	default:
		return 0, fmt.Errorf("reading the declaration of %s: %w", d.Machine, err)
	}
	var rev uint64
	if prev == 0 {
		rev, err = kv.Create(ctx, d.Machine, data)
	} else {
		rev, err = kv.Update(ctx, d.Machine, data, prev)
	}
	if errors.Is(err, jetstream.ErrKeyExists) {
		return 0, fmt.Errorf("declaration of %s generation %d: another writer wrote first: %w", d.Machine, d.Generation, ErrStale)
	}
	if err != nil {
		return 0, fmt.Errorf("writing the declaration of %s: %w", d.Machine, err)
	}
	return rev, nil
}
