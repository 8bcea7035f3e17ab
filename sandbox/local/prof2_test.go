package local
import ("testing";"time";"context";"sort";"os/exec";"io";"github.com/capsule-host/capsule-host/sandbox")
func TestProf2(t *testing.T) {
	be, _ := New(Options{})
	sp := sandbox.ProcessSpec{Argv: []string{"/bin/true"}, Cwd: "/tmp", Stdin: sandbox.StdinSpec{Mode: sandbox.StdinClosed}, Output: sandbox.OutputSpec{RingBytes: 1000, SpillBytes: 1000, SpillDir: "/tmp", Overflow: sandbox.DropOldest}, Grace: time.Second, Drain: time.Second}
	ctx := context.Background()
	var a, b, c []time.Duration
	for i := 0; i < 300; i++ {
		t0 := time.Now()
		h, _ := be.Start(ctx, sp)
		t1 := time.Now()
		h.Wait(ctx)
		t2 := time.Now()
		be.Cleanup(ctx, h.Ref())
		t3 := time.Now()
		cmd := exec.Command("/bin/true"); cmd.Stdout, cmd.Stderr = io.Discard, io.Discard; cmd.Run()
		a = append(a, t1.Sub(t0)); b = append(b, t2.Sub(t1)); c = append(c, time.Since(t3))
	}
	for _, x := range [][]time.Duration{a,b,c} { sort.Slice(x, func(i,j int) bool {return x[i]<x[j]}); t.Log(x[len(x)/2], x[len(x)*9/10]) }
}
