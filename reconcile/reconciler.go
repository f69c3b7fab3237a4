package reconcile

import (
	"cmp"
	"errors"
	"io"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshhost/meshhost/digest"
)

// Config is what a Reconciler needs. Runtime is required; every other field
// has a default.
type Config struct {
	Runtime Runtime
	// Owner is written on every container this Reconciler creates
	// (LabelOwner), and only containers carrying it are ever removed or
	// replaced. The agent uses its machine's name. Empty is an owner too.
	Owner string
	// NoInPlaceUpdates replaces a container whose resources changed instead
	// of updating it in place. Podman before 5.1 (Debian's 4.3) applies
	// `podman update` to the running cgroup only: the next start restores
	// the create-time limits, silently. The agent sets this for such a
	// runtime.
	NoInPlaceUpdates bool
	// Logger receives a line for every action: container, kind, reason,
	// duration. Nil discards.
	Logger *slog.Logger
	// Registerer receives the reconciler's metrics. Nil registers none.
	Registerer prometheus.Registerer
	// Concurrency bounds the runtime calls in flight. Default 4.
	Concurrency int
	// Budget bounds replacements and removals per window. Default
	// DefaultBudget.
	Budget Budget
	// BudgetUsed restores the start times of replacements and removals made by an
	// earlier Reconciler (see Reconciler.BudgetUsed), so that a restart does
	// not reset the budget.
	BudgetUsed []time.Time
	// BudgetCharged, when set, saves the budget as soon as a pass charges
	// it: Apply calls it with the start times in the window (what BudgetUsed
	// returns) after charging the pass's replacements and removals and
	// before any runtime call of the pass. A process killed mid-pass then
	// restarts with the charges of those it began (Config.BudgetUsed); saving only
	// after the pass would forget them, and an agent crash-looping through
	// replacements would begin one per restart, whatever the budget.
	//
	// If it returns an error, the pass's replacements and removals are
	// deferred and uncharged, as if the budget were spent, and
	// Result.ChargeErr says why. The budget is the guard against
	// replacement storms, and a charge that is not saved does not survive
	// the crash it exists for. Only replacements and removals wait:
	// creates, starts, resumed and rolled back replacements, updates and
	// the finishing of removals cut short go on, and a deferred
	// replacement whose container is not running is started as it is, so
	// nothing is left down. Every pass tries again, so they go ahead as
	// soon as a save succeeds (e.g. once the operator frees the full
	// disk), without a restart.
	BudgetCharged func(used []time.Time) error
	// Frozen, when set, is asked right before each action that would
	// create, replace, remove, update or adopt a container begins: while it
	// reports true, the action is not begun (Outcome.Frozen), and a
	// container it would have replaced or updated that is not running is
	// started as it is, so nothing is left down. An action begun before
	// stays whole: a replacement is never stopped halfway. Starts, and the
	// resumed or rolled back replacements a crash interrupted, go on: they
	// restore containers, they change none. The agent's `meshhost freeze`.
	Frozen func() bool
	// Adoptions restores adoptions made by an earlier Reconciler (see
	// Reconciler.Adoptions). With NoInPlaceUpdates, those of a version
	// before AdoptionVersion 1 (made by a meshhost that updated adopted
	// containers in place and recorded the limits as in force) are not
	// restored: each such container is inspected and judged again, and one
	// whose limits vanished at a restart is adopted with the limits it has
	// and replaced within the budget, naming the resources. Without
	// NoInPlaceUpdates they are restored as they are: there, what an
	// update set survives restarts.
	Adoptions []Adoption
	// Now is the clock for the budget and durations. Nil: time.Now.
	Now func() time.Time
	// HealthTimeout bounds the wait for a new container with a healthcheck
	// to become healthy. Default 5 minutes.
	HealthTimeout time.Duration
	// HealthPoll is how often that wait inspects the container. Default 1s.
	HealthPoll time.Duration
	// HashKey is the machine's key for the digest label of every container
	// created (digest.Key.Of, keyed so that a guessed env or label value
	// cannot be checked against it), for the hashes that stand for env and
	// label values in its record label (digest.Key.Record), and in every
	// Change of a plan, its reasons and the log. The agent passes its state
	// directory's, so that hashes compare across restarts and differ
	// between machines. Nil: a key of this Reconciler's own
	// (digest.NewRandomKey). The digests of containers created under
	// another key (an earlier Reconciler's, or a hash.key lost and made
	// anew) cannot be judged: each is inspected once and compared field by
	// field, kept (adopted) when it matches and replaced when it differs,
	// its reason saying "hash key changed"; containers labelled before
	// digest v2 are judged by their v1 digest.
	HashKey *digest.Key
}

// Budget bounds replacements and removals (Action.Disrupts): at most Max
// may begin within any Window. Those beyond it are deferred to a later
// pass (a deferred removal leaves its container as it is). Creating a
// missing container is never charged; every replacement is, whatever its
// reason (a name mode switch included), and so is every removal of a
// container no longer declared: the harm of the incident was running
// services going away and coming back, and a removal takes one away for
// good. Finishing a removal cut short (nothing runs in it) is not
// charged.
type Budget struct {
	Max    int
	Window time.Duration
}

// DefaultBudget is conservative: three replacements a minute replaces a
// 40-container machine in a quarter of an hour, and never as a storm.
var DefaultBudget = Budget{Max: 3, Window: time.Minute}

// Reconciler plans and applies passes over one machine's runtime. Its
// methods may be called from several goroutines, but passes are meant to
// run one at a time: the budget and adoptions it keeps are shared by all.
type Reconciler struct {
	cfg     Config
	rt      Runtime
	log     *slog.Logger
	now     func() time.Time
	metrics *metrics
	state   state
	// memo is what the last plan leaves for the next (see shape).
	memo atomic.Pointer[memo]
	// spareSeen is a plan's buffer for the next (takeSeen).
	spareSeen atomic.Pointer[[]seen]
	// fullPath turns the plan's fast paths off (tests: the differential
	// test compares both).
	fullPath bool
}

// New returns a Reconciler for cfg.
func New(cfg Config) (*Reconciler, error) {
	if cfg.Runtime == nil {
		return nil, errors.New("reconcile: Config.Runtime is required")
	}
	if cfg.Budget == (Budget{}) {
		cfg.Budget = DefaultBudget
	}
	if cfg.Budget.Max < 0 || cfg.Budget.Window <= 0 {
		return nil, errors.New("reconcile: Config.Budget needs Max >= 0 and a positive Window")
	}
	cfg.Concurrency = cmp.Or(max(cfg.Concurrency, 0), 4)
	cfg.HealthTimeout = cmp.Or(cfg.HealthTimeout, 5*time.Minute)
	cfg.HealthPoll = cmp.Or(cfg.HealthPoll, time.Second)
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.HashKey == nil {
		cfg.HashKey = digest.NewRandomKey()
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	r := &Reconciler{
		cfg: cfg, rt: cfg.Runtime, log: log.With("component", "reconcile"), now: cfg.Now, metrics: m,
	}
	if again := r.state.init(cfg); len(again) > 0 {
		r.log.Warn("adoptions recorded by an older meshhost may name limits an in-place update set and a restart took away; inspecting those containers again",
			"containers", again)
	}
	m.budgetUsed.Set(float64(len(r.BudgetUsed())))
	m.budgetLimit.Set(float64(cfg.Budget.Max))
	m.budgetWindow.Set(cfg.Budget.Window.Seconds())
	return r, nil
}

// ReportHeld publishes n replacements and removals held back before Apply by whoever
// plans the pass (the agent's blast-radius hold), in
// meshhost_reconcile_replacements_pending{reason="held"}, next to those
// the budget deferred; 0 once nothing is held.
func (r *Reconciler) ReportHeld(n int) {
	r.metrics.pending.WithLabelValues(PendingHeld).Set(float64(n))
}
