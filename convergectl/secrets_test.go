package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/autopilot"
	"github.com/convergekit/converge/boltstore"
	"github.com/convergekit/converge/controller"
	"github.com/convergekit/converge/plan"
)

// secrets are the secret values the secret fixture holds, each where an
// operator would look: a target's environment, an object's data, reasons
// and errors, a history entry, a plan host's reason.
var secrets = []string{"not-printed-anywhere", "url-pass-xyz", "data-token-xyz", "error-pass-xyz", "history-token-xyz", "plan-pass-xyz", "recent-pass-xyz"}

// secretFixture writes a bolt file, sealed with sealer when it is not nil,
// holding the target "da" of a device agent (a Compose project whose
// environment holds a password), an object host/db and the failed plan
// "pull", each with secrets in them; it returns its path.
func secretFixture(t *testing.T, sealer converge.Sealer) string {
	t.Helper()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "da.db")
	st, err := boltstore.Open(path, boltstore.Options{Sealer: sealer})
	require.NoError(t, err)
	defer func() { require.NoError(t, st.Close()) }()

	_, err = st.PutTarget(ctx, "da", json.RawMessage(`{"name":"da","services":{"db":{"image":"postgres:16",
		"environment":{"DB_PASSWORD":"not-printed-anywhere","POSTGRES_USER":"app"},
		"command":["--dsn=postgres://app:url-pass-xyz@db/app"]}}}`))
	require.NoError(t, err)

	obj := controller.Object{
		State: "provisioning", Since: time.Now(), Reason: "waiting for API_TOKEN=history-token-xyz",
		Data:           json.RawMessage(`{"ip":"10.0.0.9","auth":{"token":"data-token-xyz"}}`),
		LastError:      &controller.Failure{At: time.Now(), Error: `connect postgres://root:error-pass-xyz@db: refused`},
		RecentFailures: []controller.Failure{{At: time.Now(), State: "provisioning", Error: "rejected DB_PASSWORD=recent-pass-xyz"}},
		Failures:       1, Retries: 1,
	}
	b, err := json.Marshal(obj)
	require.NoError(t, err)
	_, err = st.Put(ctx, converge.StoreRecord{Key: "host/db", Value: b},
		converge.HistoryEntry{At: time.Now(), To: "provisioning", Reason: "added with API_TOKEN=history-token-xyz"})
	require.NoError(t, err)

	bus := autopilot.NewBus(autopilot.Host{Name: "w1", Kind: "worker"})
	bus.OnSignal = func(node string, _ autopilot.Signal) {
		_ = bus.Respond(node, plan.TargetApplyFailed, "pull https://robot:plan-pass-xyz@registry.example/app failed")
	}
	runner, err := plan.NewRunner(st, plan.RunnerConfig{
		Handlers:     map[string]plan.CommandHandler{"update": &autopilot.CommandHandler{Sender: bus}},
		PollInterval: time.Millisecond,
	})
	require.NoError(t, err)
	require.NoError(t, runner.Create(ctx, &plan.Document{Spec: plan.Plan{ID: "pull", Commands: []plan.Command{{
		Kind:    "update",
		Targets: []plan.CommandTargets{{Group: "workers", Discovery: plan.CommandDiscovery{Static: []string{"w1"}}}},
	}}}}))
	_, err = runner.Run(ctx, "pull")
	require.ErrorIs(t, err, plan.ErrFailed)
	return path
}

// TestNoSecretsShown: over a device agent's bolt file, sealed and not, no
// secret is printed in clear by any read command, in any output format,
// unless --show-secrets is given with the key (a store that is not sealed
// has no key: --show-secrets alone shows them). Sealed values are shown
// as sealed, never as data, without the key; --show-secrets without the
// key of a sealed store is an error that prints nothing.
func TestNoSecretsShown(t *testing.T) {
	key := []byte("0123456789abcdef0123456789abcdef")
	sealer, err := converge.NewAESGCMSealer(key)
	require.NoError(t, err)
	keyFile := filepath.Join(t.TempDir(), "key")
	require.NoError(t, os.WriteFile(keyFile, []byte(hexOf(key)+"\n"), 0o600))

	// Every read command, and the secrets it would show in clear with
	// --show-secrets.
	reads := []struct {
		args  []string
		shows []string
	}{
		{[]string{"kinds"}, nil},
		{[]string{"targets"}, nil},
		{[]string{"target", "da"}, []string{"not-printed-anywhere", "url-pass-xyz"}},
		{[]string{"objects", "host"}, []string{"error-pass-xyz"}},
		{[]string{"object", "host", "db"}, []string{"data-token-xyz", "error-pass-xyz", "history-token-xyz", "recent-pass-xyz"}},
		{[]string{"plans"}, nil},
		{[]string{"plan", "pull"}, []string{"plan-pass-xyz"}},
	}
	for _, sealed := range []bool{false, true} {
		var s converge.Sealer
		name := "clear"
		if sealed {
			s, name = sealer, "sealed"
		}
		path := secretFixture(t, s)
		for _, rd := range reads {
			for _, o := range outputFormats {
				t.Run(name+"/"+strings.Join(rd.args, " ")+"/"+o, func(t *testing.T) {
					args := append(append([]string{}, rd.args...), "--bolt", path, "-o", o)

					// No flag: nothing in clear; sealed values say so.
					r := ctl(t, args...)
					require.Equal(t, exitOK, r.code, r.err)
					assertNoSecret(t, r)
					if sealed && len(rd.shows) > 0 {
						assert.Contains(t, r.out, "sealed", "a sealed value is shown as sealed")
					} else if len(rd.shows) > 0 {
						assert.Contains(t, r.out, converge.Redacted)
					}

					// The key alone opens the values, and still prints no secret.
					r = ctl(t, append(args, "--key-file", keyFile)...)
					require.Equal(t, exitOK, r.code, r.err)
					assertNoSecret(t, r)
					if len(rd.shows) > 0 {
						assert.Contains(t, r.out, converge.Redacted)
					}

					// --show-secrets without the key: a sealed store refuses,
					// naming the flag; a clear one shows them.
					r = ctl(t, append(args, "--show-secrets")...)
					if sealed {
						assert.Equal(t, exitError, r.code)
						assert.Empty(t, r.out)
						assertNoSecret(t, r)
						if o == "json" {
							assert.Contains(t, r.err, `"kind":"sealed"`)
						}
						assert.Contains(t, r.err, "--show-secrets: the store's values are sealed: give their key with --key-file")
					} else {
						require.Equal(t, exitOK, r.code, r.err)
						for _, secret := range rd.shows {
							assert.Contains(t, r.out, secret)
						}
					}

					// --show-secrets with the key (also named by the
					// environment): everything in clear.
					r = ctl(t, append(args, "--show-secrets", "--key-file", keyFile)...)
					require.Equal(t, exitOK, r.code, r.err)
					for _, secret := range rd.shows {
						assert.Contains(t, r.out, secret)
					}
					if sealed && len(rd.shows) > 0 {
						r = ctlEnv(t, []string{keyFileEnv + "=" + keyFile}, append(args, "--show-secrets")...)
						require.Equal(t, exitOK, r.code, r.err)
						assert.Contains(t, r.out, rd.shows[0])
					}
				})
			}
		}

		// The commands that write print what they changed: no secret
		// either (a sealed store needs the key to be written).
		for _, o := range outputFormats {
			t.Run(name+"/writes/"+o, func(t *testing.T) {
				path := secretFixture(t, s)
				for _, args := range [][]string{{"release", "host", "db"}, {"retry", "pull"}, {"abort", "pull"}} {
					args = append(args, "--bolt", path, "-o", o)
					if sealed {
						args = append(args, "--key-file", keyFile)
					}
					r := ctl(t, args...)
					assert.Equal(t, exitOK, r.code, r.err)
					assertNoSecret(t, r)
				}
			})
		}
	}
}

func assertNoSecret(t *testing.T, r result) {
	t.Helper()
	for _, secret := range secrets {
		assert.NotContains(t, r.out+r.err, secret)
	}
}

// TestRedact: what is replaced in JSON documents and in text.
func TestRedact(t *testing.T) {
	jsonTests := []struct{ in, want string }{
		{`{"environment":{"DB_PASSWORD":"pw","USER":"app"}}`, `{"environment":{"DB_PASSWORD":"[redacted]","USER":"app"}}`},
		{`{"b":1,"a":{"api_key":123}}`, `{"b":1,"a":{"api_key":"[redacted]"}}`},
		{`{"secrets":{"db":["x",{"y":"z"}],"n":null,"e":""}}`, `{"secrets":{"db":["[redacted]",{"y":"[redacted]"}],"n":null,"e":""}}`},
		{`{"env":[{"name":"GITHUB_TOKEN","value":"t"},{"name":"HOME","value":"/root"}]}`, `{"env":[{"name":"GITHUB_TOKEN","value":"[redacted]"},{"name":"HOME","value":"/root"}]}`},
		{`{"environment":["SMTP_PASS=pw","MODE=prod"]}`, `{"environment":["SMTP_PASS=[redacted]","MODE=prod"]}`},
		{`{"url":"postgres://app:pw@db/app","ok":true}`, `{"url":"postgres://app:[redacted]@db/app","ok":true}`},
		{`"plain"`, `"plain"`},
		{`{"a":1} {"b":2}`, `"[redacted] (not JSON: data after the JSON value)"`},
		{`{"a":`, `"[redacted] (not JSON: it ends before its value does)"`},
	}
	for _, tt := range jsonTests {
		t.Run(tt.in, func(t *testing.T) {
			assert.Equal(t, tt.want, string(redactJSON(json.RawMessage(tt.in))))
		})
	}
	textTests := []struct{ in, want string }{
		{"failed with DB_PASSWORD=pw MODE=x", "failed with DB_PASSWORD=[redacted] MODE=x"},
		{`token='a b' password="c d"`, "token=[redacted] password=[redacted]"},
		{`got {"api_key": "k", "user": "u"}`, `got {"api_key": "[redacted]", "user": "u"}`},
		{"dial redis://:tok@cache:6379", "dial redis://:[redacted]@cache:6379"},
		{"disk full", "disk full"},
	}
	for _, tt := range textTests {
		t.Run(tt.in, func(t *testing.T) {
			assert.Equal(t, tt.want, redactText(tt.in))
		})
	}
}

// FuzzRedactJSON: any document gives valid JSON, never a panic, and a
// document without secrets keeps its value.
func FuzzRedactJSON(f *testing.F) {
	for _, s := range []string{`{"DB_PASSWORD":"x"}`, `[1,"a=b",{"name":"TOKEN","value":2}]`, `null`, `{"a":`, `"\u00e9"`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, doc string) {
		out := redactJSON(json.RawMessage(doc))
		if len(doc) == 0 {
			return
		}
		require.True(t, json.Valid(out), "%q gave %q", doc, out)
		if !json.Valid([]byte(doc)) || strings.Contains(doc, "=") || strings.Contains(doc, "@") {
			return
		}
		// Numbers as written: a valid document may hold one no float64 holds.
		decode := func(b []byte) any {
			d := json.NewDecoder(bytes.NewReader(b))
			d.UseNumber()
			var v any
			require.NoError(t, d.Decode(&v))
			return v
		}
		in, got := decode([]byte(doc)), decode(out)
		if !strings.Contains(string(out), converge.Redacted) {
			assert.Equal(t, in, got)
		}
	})
}
