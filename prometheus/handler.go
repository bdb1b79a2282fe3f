package prometheus

import (
	"net/http"
	"sync"

	prom "github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Handler returns the http.Handler of GET /metrics for a program whose
// only metrics are m's: the Prometheus text (or protobuf) exposition of a
// registry of its own that holds m and the process and Go runtime
// collectors (process_*, go_*), as promhttp serves it. Every call returns
// the same handler. A program with metrics of its own registers m on its
// registry instead (reg.MustRegister(m)) and serves that.
func (m *Metrics) Handler() http.Handler {
	m.handlerOnce.Do(func() {
		reg := prom.NewRegistry()
		reg.MustRegister(m, collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), collectors.NewGoCollector())
		m.handler = promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg})
	})
	return m.handler
}

// handlerState is the part of Metrics that Handler fills once.
type handlerState struct {
	handlerOnce sync.Once
	handler     http.Handler
}
