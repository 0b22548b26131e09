package etcdcompare

import (
	"context"
	"testing"

	"github.com/d3b93e30/redlock/chaos"
)

// TestCatalogueMapsEveryChaosScenario: each scenario of the chaos catalogue
// has an etcd counterpart, run or marked not applicable with a reason.
func TestCatalogueMapsEveryChaosScenario(t *testing.T) {
	mapped := map[string]Scenario{}
	for _, s := range Catalogue() {
		if s.Redlock != "" {
			mapped[s.Redlock] = s
		}
		if s.NotApplicable == "" && (s.Expect == "" || s.ExpectFenced == "" || s.Duration <= 0 || s.Workload.Clients < 1) {
			t.Errorf("%s: runnable but incomplete: %+v", s.Name, s)
		}
		if got, ok := Find(s.Name); !ok || got.Name != s.Name {
			t.Errorf("Find(%q) = %v, %v", s.Name, got.Name, ok)
		}
	}
	for _, rs := range chaos.Catalogue() {
		if _, ok := mapped[rs.Name]; !ok {
			t.Errorf("chaos scenario %q has no etcd counterpart in Catalogue (map it, or mark it NotApplicable with the reason)", rs.Name)
		}
	}
}

func runScenario(t *testing.T, name string, trials int) Result {
	t.Helper()
	s, ok := Find(name)
	if !ok {
		t.Fatalf("no scenario %q", name)
	}
	r, err := Run(context.Background(), s, trials, 1, func(l string) { t.Log(l) })
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range r.Notes {
		t.Log("note:", n)
	}
	return r
}

// TestClientPauseOnEtcd: etcd's lock does not survive a holder's pause past
// its lease TTL without fencing, and does with it. Every trial shows an
// overlap and a stale write accepted by the plain resource; the fenced
// resource (create revision as the token) rejects it.
func TestClientPauseOnEtcd(t *testing.T) {
	checkLeaks(t)
	r := runScenario(t, "client-pause", 2)
	for i, rep := range r.Reports {
		if rep.Violations == 0 || rep.StaleWritesPlain == 0 {
			t.Errorf("trial %d: %d violations, %d stale plain writes; want an overlap and a stale write", i+1, rep.Violations, rep.StaleWritesPlain)
		}
		if rep.StaleWritesFenced != 0 || rep.RejectedWritesFenced == 0 {
			t.Errorf("trial %d: fenced resource accepted %d stale writes and rejected %d; want 0 accepted, the stale one rejected",
				i+1, rep.StaleWritesFenced, rep.RejectedWritesFenced)
		}
		if rep.TokenOrderViolations != 0 {
			t.Errorf("trial %d: %d tokens out of holder order", i+1, rep.TokenOrderViolations)
		}
	}
	if r.Observed != chaos.Unsafe || r.ObservedFenced != chaos.Safe || !r.Match() {
		t.Errorf("observed %s / fenced %s, want unsafe / safe", r.Observed, r.ObservedFenced)
	}
	// The holder's belief ends when its session's Done fires (chaos.Held),
	// not at a fixed deadline: chaos's RunTarget tests check that the
	// oracle's end of the hold is that moment.
}

// TestNoFaultsOnEtcd: clients take turns; tokens rise in holder order.
func TestNoFaultsOnEtcd(t *testing.T) {
	checkLeaks(t)
	r := runScenario(t, "no-faults", 1)
	if r.Acquisitions < 4 || r.Violations != 0 || r.StalePlain != 0 || r.TokenOrder != 0 || !r.Match() {
		t.Errorf("no-faults: %d acquisitions, %d violations, %d stale plain, %d token order, observed %s; want a safe run with turns",
			r.Acquisitions, r.Violations, r.StalePlain, r.TokenOrder, r.Observed)
	}
}

// TestMajorityKilledOnEtcd: without a majority nothing is granted.
func TestMajorityKilledOnEtcd(t *testing.T) {
	checkLeaks(t)
	r := runScenario(t, "majority-killed", 1)
	if r.Acquisitions != 0 || r.Failed == 0 || r.Observed != chaos.Safe {
		t.Errorf("majority-killed: %d acquisitions, %d failures, observed %s; want none granted, failures reported, safe",
			r.Acquisitions, r.Failed, r.Observed)
	}
}

func TestNotApplicableIsSkipped(t *testing.T) {
	s, _ := Find("clock-jump")
	r, err := Run(context.Background(), s, 3, 1, nil)
	if err != nil || r.Skipped == "" || !r.Match() || len(r.Histories) != 0 {
		t.Fatalf("clock-jump on etcd: %+v, %v; want skipped with the reason", r, err)
	}
}

// TestMajorityPartitionOnEtcd: while a majority of members is cut off no
// lock is granted (every acquisition comes after the cut healed), calls
// fail meanwhile, and locks are granted again after it.
func TestMajorityPartitionOnEtcd(t *testing.T) {
	checkLeaks(t)
	r := runScenario(t, "majority-partition", 1)
	s, _ := Find("majority-partition")
	if r.Observed != chaos.Safe || !r.Match() || r.Acquisitions == 0 {
		t.Fatalf("majority-partition: observed %s, %d acquisitions; want safe with locks after the heal", r.Observed, r.Acquisitions)
	}
	if r.Failed == 0 {
		t.Errorf("no call failed while the majority was cut off: the cut did not hold")
	}
	// A lock acquired before the heal would make the verdict broken
	// (Scenario.NoneBefore).
	if s.NoneBefore <= 0 {
		t.Errorf("majority-partition checks no acquisition before the heal")
	}
	if got := r.Reports[0].Faults; got != 2 {
		t.Errorf("%d faults, want 2 of 3 members partitioned", got)
	}
}
