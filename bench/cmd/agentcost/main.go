// Command agentcost measures what a device agent costs a small device, as
// a process, beside two floors measured in the same run:
//
//   - start: from the agent's exec until it reports a verified pass that
//     changed nothing over a converged project, against enginefloor
//     -mode start (exec, list and inspect the project's containers, exit);
//   - idle: the agent's resident memory, CPU time, context switches and
//     passes while the project stays converged, against enginefloor -mode
//     events (a static Go program that only holds the engine's event
//     stream), sampled side by side.
//
// It builds the demo image, the agent (examples/deviceagent) and the floor
// (cmd/enginefloor) itself, converges a project of -containers services
// under a name unique to the run, and removes what it created at the end.
// Its output is Go benchmark lines (benchstat reads them) and a summary:
//
//	go run ./cmd/agentcost -idle 10m -rounds 5 | tee results/DATE-agentcost.txt
//
// It needs a Docker engine and the Go toolchain.
package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/docker/docker/client"

	"github.com/convergekit/converge/docker/dockertest"
)

func main() {
	var o options
	flag.IntVar(&o.containers, "containers", 20, "services in the project")
	flag.DurationVar(&o.idle, "idle", 10*time.Minute, "how long the idle agent and floor are sampled")
	flag.DurationVar(&o.sample, "sample", 5*time.Second, "sampling period of the idle phase")
	flag.IntVar(&o.rounds, "rounds", 5, "start-up measurements of each")
	flag.DurationVar(&o.interval, "interval", 5*time.Minute, "the agent's periodic pass (its -interval)")
	flag.StringVar(&o.args, "agent-args", "-state {state} -key {state}.key -root {root} -interval {interval} -http 127.0.0.1:0",
		"the agent's arguments once the project converged (it resumes its stored target); {compose}, {state}, {root} and {interval} are replaced")
	flag.StringVar(&o.firstArgs, "first-args", "-f {compose} -state {state} -key {state}.key -root {root} -interval {interval}",
		"the agent's arguments for the first run, which sets the target and converges the project")
	flag.StringVar(&o.noop, "noop", `^pass \d+: verified, no change`, "regexp of the agent's line for a verified pass that changed nothing")
	flag.StringVar(&o.pass, "pass", `^pass \d+: `, "regexp of the agent's line for any pass")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "agentcost:", err)
		os.Exit(1)
	}
}

type options struct {
	containers       int
	idle, sample     time.Duration
	interval         time.Duration
	rounds           int
	args, noop, pass string
	firstArgs        string
}

func run(ctx context.Context, o options) (err error) {
	noop, err := regexp.Compile(o.noop)
	if err != nil {
		return err
	}
	pass, err := regexp.Compile(o.pass)
	if err != nil {
		return err
	}
	eng, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		return err
	}
	defer eng.Close()
	img, _, err := dockertest.BuildAppImage(ctx, eng)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "agentcost-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	agentBin, floorBin, linkBin := filepath.Join(dir, "deviceagent"), filepath.Join(dir, "enginefloor"), filepath.Join(dir, "linkfloor")
	for pkg, bin := range map[string]string{"../examples/deviceagent": agentBin, "./cmd/enginefloor": floorBin, "./cmd/linkfloor": linkBin} {
		if err := build(ctx, pkg, bin); err != nil {
			return err
		}
	}
	suffix := make([]byte, 4)
	_, _ = rand.Read(suffix)
	project := "agentcost-" + hex.EncodeToString(suffix)
	defer func() {
		if cerr := dockertest.RemoveProject(context.WithoutCancel(ctx), eng, project); err == nil {
			err = cerr
		}
	}()
	compose := filepath.Join(dir, "compose.yaml")
	if err := os.WriteFile(compose, []byte(composeFile(project, img, o.containers)), 0o644); err != nil {
		return err
	}
	root := filepath.Join(dir, "root")
	if err := os.MkdirAll(root, 0o755); err != nil {
		return err
	}
	repl := strings.NewReplacer("{compose}", compose, "{state}", filepath.Join(dir, "state.db"),
		"{root}", root, "{interval}", o.interval.String())
	args := strings.Fields(repl.Replace(o.args))
	firstArgs := strings.Fields(repl.Replace(o.firstArgs))

	fmt.Printf("# date: %s\n", time.Now().UTC().Format(time.RFC3339))
	fmt.Printf("# machine: %d cores, %s %s/%s, %s\n", runtime.NumCPU(), runtime.Version(), runtime.GOOS, runtime.GOARCH, cpuModel())
	fmt.Printf("# command (in bench/): go run ./cmd/agentcost -containers %d -idle %s -sample %s -rounds %d -interval %s\n", o.containers, o.idle, o.sample, o.rounds, o.interval)
	fmt.Printf("# agent: deviceagent %s (first run: %s)\n", strings.Join(args, " "), strings.Join(firstArgs, " "))
	fmt.Printf("# project %s: %d containers of %s\n", project, o.containers, img)
	fmt.Printf("# load average at the start: %s\n", loadAverage())

	// The first run converges the project; it is not measured.
	first, err := startAgent(ctx, agentBin, firstArgs)
	if err != nil {
		return err
	}
	if _, err := first.waitLine(ctx, pass, 3*time.Minute); err != nil {
		first.stop()
		return fmt.Errorf("first pass: %w", err)
	}
	if err := first.stop(); err != nil {
		return err
	}

	var agentStarts, floorStarts, linkStarts []time.Duration
	var idle *proc
	for i := range o.rounds {
		d, err := floorStart(ctx, floorBin, project, o.containers)
		if err != nil {
			return err
		}
		floorStarts = append(floorStarts, d)
		if d, err = floorStart(ctx, linkBin, project, o.containers); err != nil {
			return err
		}
		linkStarts = append(linkStarts, d)
		a, err := startAgent(ctx, agentBin, args)
		if err != nil {
			return err
		}
		d, err = a.waitLine(ctx, noop, 2*time.Minute)
		if err != nil {
			a.stop()
			return fmt.Errorf("start round %d: %w", i+1, err)
		}
		agentStarts = append(agentStarts, d)
		fmt.Printf("BenchmarkEngineFloorStart \t1\t%d ns/op\n", floorStarts[i].Nanoseconds())
		fmt.Printf("BenchmarkLinkFloorStart \t1\t%d ns/op\n", linkStarts[i].Nanoseconds())
		fmt.Printf("BenchmarkDeviceAgentStart \t1\t%d ns/op\n", d.Nanoseconds())
		if i == o.rounds-1 {
			idle = a
		} else if err := a.stop(); err != nil {
			return err
		}
	}
	defer idle.stop()
	floor, err := holdEvents(ctx, floorBin, project)
	if err != nil {
		return err
	}
	defer floor.stop()
	link, err := holdEvents(ctx, linkBin, project)
	if err != nil {
		return err
	}
	defer link.stop()
	// Let both settle (the agent's first pass, a GC) before the window.
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(5 * time.Second):
	}
	passes0 := idle.count(pass)
	a0, f0, l0 := idle.usage(), floor.usage(), link.usage()
	var aRSS, fRSS, lRSS, aAnon, fAnon, lAnon []int64
	t0 := time.Now()
	for time.Since(t0) < o.idle {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(o.sample):
		}
		au, fu, lu := idle.usage(), floor.usage(), link.usage()
		aRSS, aAnon = append(aRSS, au.rssKiB), append(aAnon, au.anonKiB)
		fRSS, fAnon = append(fRSS, fu.rssKiB), append(fAnon, fu.anonKiB)
		lRSS, lAnon = append(lRSS, lu.rssKiB), append(lAnon, lu.anonKiB)
	}
	window := time.Since(t0)
	a1, f1, l1 := idle.usage(), floor.usage(), link.usage()
	passes := idle.count(pass) - passes0
	for _, r := range []struct {
		name   string
		u0, u1 usage
		rss    []int64
		anon   []int64
		passes int
	}{{"EngineFloorIdle", f0, f1, fRSS, fAnon, 0}, {"LinkFloorIdle", l0, l1, lRSS, lAnon, 0}, {"DeviceAgentIdle", a0, a1, aRSS, aAnon, passes}} {
		mins := window.Minutes()
		fmt.Printf("Benchmark%s \t1\t%d ns/op\t%d rss-KiB\t%d anon-KiB\t%d max-rss-KiB\t%.1f cpu-ms/min\t%.1f wakeups/min\t%d passes\n",
			r.name, window.Nanoseconds(), median(r.rss), median(r.anon), slices.Max(r.rss),
			float64(r.u1.cpu-r.u0.cpu)/float64(time.Millisecond)/mins,
			float64(r.u1.switches-r.u0.switches)/mins, r.passes)
	}
	ms, mf, ml := median(agentStarts), median(floorStarts), median(linkStarts)
	ra, rf, rl := median(aRSS), median(fRSS), median(lRSS)
	fmt.Printf("# start: agent %s, engine floor %s (medians of %d): %.2fx; the floor linked with the agent's packages %s: %.2fx\n",
		ms.Round(100*time.Microsecond), mf.Round(100*time.Microsecond), o.rounds, float64(ms)/float64(mf), ml.Round(100*time.Microsecond), float64(ml)/float64(mf))
	fmt.Printf("# idle RSS: agent %d KiB, floor %d KiB (medians over %s): %.2fx; the floor linked with the agent's packages %d KiB: %.2fx\n",
		ra, rf, window.Round(time.Second), float64(ra)/float64(rf), rl, float64(rl)/float64(rf))
	fmt.Printf("# load average at the end: %s\n", loadAverage())
	fmt.Printf("# idle passes: %d in %s at -interval %s (at most %d expected)\n", passes, window.Round(time.Second), o.interval, int(window/o.interval)+1)
	return nil
}

// floorStart runs bin -mode start (exec, list and inspect the project's
// containers, exit) and returns how long it took.
func floorStart(ctx context.Context, bin, project string, containers int) (time.Duration, error) {
	t0 := time.Now()
	out, err := exec.CommandContext(ctx, bin, "-mode", "start", "-project", project).CombinedOutput()
	d := time.Since(t0)
	if err != nil {
		return 0, fmt.Errorf("%s start: %w: %s", filepath.Base(bin), err, out)
	}
	if !strings.Contains(string(out), fmt.Sprintf("inspected %d", containers)) {
		return 0, fmt.Errorf("%s start: %s", filepath.Base(bin), out)
	}
	return d, nil
}

// holdEvents starts bin -mode events and waits until it is subscribed.
func holdEvents(ctx context.Context, bin, project string) (*proc, error) {
	p, err := startProc(ctx, bin, "-mode", "events", "-project", project)
	if err != nil {
		return nil, err
	}
	if _, err := p.waitLine(ctx, regexp.MustCompile(`^ready$`), time.Minute); err != nil {
		p.stop()
		return nil, fmt.Errorf("%s events: %w", filepath.Base(bin), err)
	}
	return p, nil
}

func build(ctx context.Context, pkg, out string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, pkg)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %w: %s", pkg, err, b)
	}
	return nil
}

func composeFile(project, img string, n int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "name: %s\nservices:\n", project)
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&b, "  s%02d:\n    image: %s\n    command: [\"/app\", \"sleep\"]\n", i, img)
	}
	return b.String()
}

// proc is a started program whose stdout lines are kept with their time.
type proc struct {
	cmd   *exec.Cmd
	start time.Time
	lines chan line
	seen  []line
}

type line struct {
	at   time.Time
	text string
}

func startAgent(ctx context.Context, bin string, args []string) (*proc, error) {
	return startProc(ctx, bin, args...)
}

func startProc(ctx context.Context, bin string, args ...string) (*proc, error) {
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	p := &proc{cmd: cmd, lines: make(chan line, 1024)}
	p.start = time.Now()
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			p.lines <- line{time.Now(), sc.Text()}
		}
		close(p.lines)
	}()
	return p, nil
}

// waitLine waits for a line matching re and returns its time since the
// start of the process.
func (p *proc) waitLine(ctx context.Context, re *regexp.Regexp, limit time.Duration) (time.Duration, error) {
	timer := time.NewTimer(limit)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-timer.C:
			return 0, fmt.Errorf("no line matching %s in %s", re, limit)
		case l, ok := <-p.lines:
			if !ok {
				return 0, fmt.Errorf("%s exited before a line matching %s", filepath.Base(p.cmd.Path), re)
			}
			p.seen = append(p.seen, l)
			if re.MatchString(l.text) {
				return l.at.Sub(p.start), nil
			}
		}
	}
}

// count returns how many lines seen so far match re.
func (p *proc) count(re *regexp.Regexp) int {
	for {
		select {
		case l, ok := <-p.lines:
			if !ok {
				goto done
			}
			p.seen = append(p.seen, l)
			continue
		default:
		}
		break
	}
done:
	n := 0
	for _, l := range p.seen {
		if re.MatchString(l.text) {
			n++
		}
	}
	return n
}

func (p *proc) stop() error {
	if p.cmd.ProcessState != nil {
		return nil
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	go func() {
		for range p.lines {
		}
	}()
	err := p.cmd.Wait()
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.Sys().(syscall.WaitStatus).Signaled() {
		return nil
	}
	return err
}

type usage struct {
	rssKiB   int64
	anonKiB  int64
	cpu      time.Duration
	switches int64
}

// usage reads the process's resident memory, CPU time and the context
// switches of all its threads from /proc.
func (p *proc) usage() usage {
	var u usage
	pid := p.cmd.Process.Pid
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid)); err == nil {
		u.rssKiB = field(string(b), "VmRSS:")
		u.anonKiB = field(string(b), "RssAnon:")
	}
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
		ut, _ := strconv.ParseInt(f[11], 10, 64)
		st, _ := strconv.ParseInt(f[12], 10, 64)
		u.cpu = time.Duration(ut+st) * 10 * time.Millisecond // USER_HZ is 100 on Linux
	}
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/status", pid))
	for _, t := range tasks {
		if b, err := os.ReadFile(t); err == nil {
			u.switches += field(string(b), "voluntary_ctxt_switches:") + field(string(b), "nonvoluntary_ctxt_switches:")
		}
	}
	return u
}

func field(status, name string) int64 {
	for l := range strings.Lines(status) {
		if rest, ok := strings.CutPrefix(l, name); ok {
			v, _ := strconv.ParseInt(strings.Fields(rest)[0], 10, 64)
			return v
		}
	}
	return 0
}

func median[T int64 | time.Duration](v []T) T {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

// loadAverage is the machine's load over 1, 5 and 15 minutes, as
// /proc/loadavg gives it: the measurement's noise.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

func cpuModel() string {
	b, _ := os.ReadFile("/proc/cpuinfo")
	for l := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(l, "model name"); ok {
			return strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(rest), ":"))
		}
	}
	return "unknown CPU"
}
