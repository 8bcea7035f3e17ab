package terminal

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/capsule-host/capsule-host/internal/testutil"
	"github.com/capsule-host/capsule-host/sandbox"
)

// mixedStream is n bytes of what terminal programs print, from a fixed
// seed: text runs (a tenth of them wide characters), SGR colours (16, 256
// and true colour), cursor positioning, erases (line, and now and then the
// display), CR LF (so it scrolls), a title now and then.
func mixedStream(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 1))
	var b strings.Builder
	b.Grow(n + 256)
	words := []string{"build", "ok", "error:", "main.go:42", "PASS", "--- FAIL", "Downloading", "100%", "█▓▒░", "✓"}
	for b.Len() < n {
		switch k := r.IntN(100); {
		case k < 40:
			for range 1 + r.IntN(8) {
				b.WriteString(words[r.IntN(len(words))])
				b.WriteByte(' ')
			}
		case k < 44:
			b.WriteString("日本語のテキスト ")
		case k < 60:
			fmt.Fprintf(&b, "\x1b[%d;%dm", r.IntN(2), 30+r.IntN(8))
		case k < 66:
			fmt.Fprintf(&b, "\x1b[38;5;%dm", r.IntN(256))
		case k < 70:
			fmt.Fprintf(&b, "\x1b[38;2;%d;%d;%dm", r.IntN(256), r.IntN(256), r.IntN(256))
		case k < 76:
			fmt.Fprintf(&b, "\x1b[%d;%dH", 1+r.IntN(24), 1+r.IntN(80))
		case k < 80:
			b.WriteString("\x1b[K")
		case k < 81:
			b.WriteString("\x1b[2J\x1b[H")
		case k < 82:
			fmt.Fprintf(&b, "\x1b]0;step %d\x07", r.IntN(1000))
		case k < 85:
			b.WriteString("\x1b[0m")
		default:
			b.WriteString("\r\n")
		}
	}
	return []byte(b.String()[:n])
}

// go test -run '^$' -bench EmulatorThroughput -benchtime 100x ./sandbox/terminal/
//
// BenchmarkEmulatorThroughput feeds 1 MiB of mixed escape sequences per
// iteration (-benchtime 100x: the 100 MB) to the screen model at
// 80×24 and 250×60 (with the registry's 1000 lines of scrollback), in the
// 64 KiB batches the registry's feeder reads, and the same bytes to an
// output log (raw capture: what the pump does with a read; no spill, so
// it is the log's ceiling). It reports both rates, by wall clock and by
// CPU time (on the loaded shared machine the wall clock is mostly waiting
// for a CPU), and emulator/raw by CPU time (the goal: >= 0.3). The screen is off the pump's path (RFC §22),
// so the ratio bounds how fast a snapshot catches up, not capture.
func BenchmarkEmulatorThroughput(b *testing.B) {
	const chunk = 1 << 20
	streams := [][]byte{mixedStream(chunk, 1), mixedStream(chunk, 2), mixedStream(chunk, 3), mixedStream(chunk, 4)}
	for _, sz := range [][2]int{{24, 80}, {60, 250}} {
		b.Run(fmt.Sprintf("%dx%d", sz[1], sz[0]), func(b *testing.B) {
			s := newScreen(b, sz[0], sz[1], 1000, nil)
			l, err := sandbox.NewOutputLog(sandbox.OutputLogConfig{RingBytes: 1 << 20, Overflow: sandbox.DropOldest})
			if err != nil {
				b.Fatal(err)
			}
			var emu, raw, emuCPU, rawCPU time.Duration
			b.SetBytes(chunk)
			for i := 0; b.Loop(); i++ {
				data := streams[i%len(streams)]
				start, cpu := time.Now(), testutil.CPUTime()
				for off := 0; off < len(data); off += 64 << 10 {
					if _, err := l.Write(data[off:min(off+64<<10, len(data))]); err != nil {
						b.Fatal(err)
					}
				}
				raw += time.Since(start)
				rawCPU += testutil.CPUTime() - cpu
				start, cpu = time.Now(), testutil.CPUTime()
				for off := 0; off < len(data); off += 64 << 10 {
					if _, err := s.Write(data[off:min(off+64<<10, len(data))]); err != nil {
						b.Fatal(err)
					}
				}
				emu += time.Since(start)
				emuCPU += testutil.CPUTime() - cpu
			}
			mb := float64(b.N) * chunk / 1e6
			b.ReportMetric(mb/emu.Seconds(), "emulator-MB/s")
			b.ReportMetric(mb/raw.Seconds(), "raw-MB/s")
			b.ReportMetric(mb/emuCPU.Seconds(), "emulator-cpu-MB/s")
			b.ReportMetric(mb/rawCPU.Seconds(), "raw-cpu-MB/s")
			b.ReportMetric(rawCPU.Seconds()/emuCPU.Seconds(), "emulator/raw")
		})
	}
}
