package registry

import "testing"

// PrepareAdopt attaches while a daemon's capsules load, and publishes
// nothing until Finish: a capsule whose load fails unregisters itself
// (RemoveCapsule, which stops its processes), and that must not reach a
// process being adopted. Abandon leaves the processes to the next daemon.
func TestPrepareAdoptPublishesOnlyAtFinish(t *testing.T) {
	daemon, dctx := keeperDaemons(t, "regprepare-")
	ctx := as("cap", "alice")
	e1, jr1 := daemon()
	id := e1.spawn(ctx, "sleep 60", PersistOptions{})
	if err := e1.r.Detach(dctx); err != nil {
		t.Fatal(err)
	}
	jr1.Close()

	// A start that fails after PrepareAdopt: nothing is published, and
	// Abandon leaves the process running with its keeper.
	e2, jr2 := daemon()
	a := e2.r.PrepareAdopt(dctx)
	if n := len(e2.r.OperatorList(OperatorFilter{})); n != 0 {
		t.Fatalf("%d processes listed before Finish, want 0", n)
	}
	a.Abandon()
	if err := e2.r.Detach(dctx); err != nil {
		t.Fatal(err)
	}
	jr2.Close()

	e3, jr3 := daemon()
	defer jr3.Close()
	a = e3.r.PrepareAdopt(dctx)
	// The capsule's load fails meanwhile: its undo removes it.
	if err := e3.r.RemoveCapsule(dctx, "cap"); err != nil {
		t.Fatal(err)
	}
	rep, err := a.Finish(dctx)
	if err != nil || rep.Running != 1 || rep.Lost != 0 {
		t.Fatalf("finish: %+v %v, want the process running", rep, err)
	}
	e3.register("cap", nil) // the capsule loads later
	if err := e3.r.Signal(ctx, id, SigKill); err != nil {
		t.Fatalf("signal the adopted process: %v", err)
	}
	if ex := e3.wait(ctx, id); ex.Signal == nil || *ex.Signal != 9 {
		t.Fatalf("exit %+v, want signal 9", ex)
	}
}
