package converge_test

import (
	"context"
	"fmt"
	"sync"

	"github.com/convergekit/converge"
)

// disk is an in-memory stand-in for a host's files.
type disk struct {
	mu    sync.Mutex
	files map[string]string
}

func (d *disk) read(path string) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.files[path]
}

func (d *disk) write(path, content string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.files[path] = content
}

// configFile is a file with the content it should have.
type configFile struct {
	disk          *disk
	path, content string
}

func (f *configFile) ID() converge.ID { return converge.ID("file:" + f.path) }

func (f *configFile) StateCurrent(context.Context, converge.DepStates) (string, error) {
	return f.disk.read(f.path), nil
}

func (f *configFile) StateGoal(context.Context, converge.DepStates) (string, error) {
	return f.content, nil
}

func (f *configFile) Check(_ context.Context, current, target string) (converge.Decision, error) {
	if current == target {
		return converge.NotRequired(), nil
	}
	return converge.Required(1), nil
}

func (f *configFile) Apply(_ context.Context, _, target string) (string, error) {
	f.disk.write(f.path, target)
	fmt.Println("write", f.path)
	return target, nil
}

func (f *configFile) ApplyDry(_ context.Context, _, target string) (string, error) {
	return target, nil
}

// webService is a service that runs already; it restarts when its
// configuration changed: it is a converge.Refresher.
type webService struct{}

func (s *webService) ID() converge.ID { return "service:web" }

func (s *webService) StateCurrent(context.Context, converge.DepStates) (string, error) {
	return "running", nil
}

func (s *webService) StateGoal(context.Context, converge.DepStates) (string, error) {
	return "running", nil
}

func (s *webService) Check(_ context.Context, current, target string) (converge.Decision, error) {
	if current == target {
		return converge.NotRequired(), nil
	}
	return converge.Required(1), nil
}

func (s *webService) Apply(_ context.Context, _, target string) (string, error) { return target, nil }

func (s *webService) ApplyDry(_ context.Context, _, target string) (string, error) {
	return target, nil
}

// Refresh restarts the service, once per walk however many of its files
// changed.
func (s *webService) Refresh(_ context.Context, current string, changed []converge.ID) (string, error) {
	fmt.Println("restart service:web after", changed)
	return current, nil
}

// A service restarts once after its configuration files changed, and never
// after a walk that changed nothing. The Walker keeps the refreshes that
// are due in its RefreshLog (in memory here; converge.NewStoreRefreshLog
// over a boltstore keeps them across a crash).
func ExampleRefresher() {
	d := &disk{files: map[string]string{}}
	site := &configFile{disk: d, path: "/etc/web/site.conf", content: "root /srv\n"}
	tls := &configFile{disk: d, path: "/etc/web/tls.conf", content: "cert web.pem\n"}

	g := converge.NewGraph()
	g.Add(converge.Wrap[string](site), converge.Present)
	g.Add(converge.Wrap[string](tls), converge.Present)
	// The files are the service's dependencies: a change of either
	// refreshes it. (An ordering edge, Graph.After, would not.)
	g.Add(converge.Wrap[string](&webService{}), converge.Present, site.ID(), tls.ID())

	walker, err := converge.NewWalker(converge.WalkerConfig{Parallelism: 1})
	if err != nil {
		fmt.Println(err)
		return
	}
	walk := func(title string) {
		fmt.Println("--", title)
		rep, err := walker.Apply(context.Background(), g)
		if err != nil {
			fmt.Println(err)
			return
		}
		res, _ := rep.Item("service:web")
		fmt.Println("service:web", res.Outcome, res.Refresh)
	}

	walk("first walk")
	walk("nothing changed")
	d.write("/etc/web/tls.conf", "cert old.pem\n") // someone edited a file
	walk("one file drifted")

	// Output:
	// -- first walk
	// write /etc/web/site.conf
	// write /etc/web/tls.conf
	// restart service:web after [file:/etc/web/site.conf file:/etc/web/tls.conf]
	// service:web changed [file:/etc/web/site.conf file:/etc/web/tls.conf]
	// -- nothing changed
	// service:web unchanged []
	// -- one file drifted
	// write /etc/web/tls.conf
	// restart service:web after [file:/etc/web/tls.conf]
	// service:web changed [file:/etc/web/tls.conf]
}
