package statuspage_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/controller"
	"github.com/convergekit/converge/statuspage"
)

// composeTarget is a device's target as a Compose-like document: services
// with their environment in both of Compose's forms.
type composeTarget struct {
	Services map[string]composeService `json:"services"`
}

type composeService struct {
	Image       string            `json:"image"`
	Environment any               `json:"environment,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
}

// sealedValue is what a store without the key shows of a sealed value.
const sealedValue = "\x00sealed:0123456789abcdef"

// composeSecrets are the secret values of composeDoc, none of which a
// page may show.
var composeSecrets = []string{"s3cr3t-db", "ghp_tokenvalue", "sk_live_stripe", "dsn-pw", "url-pw", "sealed:0123456789abcdef", "extra-secret"}

var composeDoc = composeTarget{Services: map[string]composeService{
	"db": {Image: "postgres:16", Environment: map[string]string{
		"POSTGRES_USER": "app", "DB_PASSWORD": "s3cr3t-db", "GITHUB_TOKEN": "ghp_tokenvalue", "SITE_ID": "extra-secret",
	}},
	"api": {Image: "example/api:1.4", Environment: []string{
		"LOG_LEVEL=debug", "STRIPE_KEY=sk_live_stripe", "DATABASE_URL=postgres://app:url-pw@db/app", "SENTRY_DSN=dsn-pw",
	}, Labels: map[string]string{"com.example.blob": sealedValue}},
}}

func TestSecretsAreNeverShown(t *testing.T) {
	build := func(context.Context, composeTarget) ([]converge.TargetStage, error) { return nil, nil }
	r, err := converge.NewTargetReconciler(converge.TargetReconcilerConfig[composeTarget]{Build: build})
	require.NoError(t, err)
	require.NoError(t, r.SetTarget(t.Context(), composeDoc))
	tg := statuspage.WatchTarget(r, statuspage.TargetOptions[composeTarget]{Name: "device"})
	defer tg.Close()

	data, err := json.Marshal(composeDoc)
	require.NoError(t, err)
	c, err := controller.New(controller.Config{Kind: "device", Handler: controller.HandlerFunc(func(context.Context, controller.Object) (controller.Result, error) {
		return controller.NoChange(), nil
	})})
	require.NoError(t, err)
	require.NoError(t, c.Add(t.Context(), "edge-1", stateNew, data))

	for _, show := range []bool{false, true} {
		t.Run(fmt.Sprint("ShowData=", show), func(t *testing.T) {
			h, err := statuspage.New(statuspage.Options{
				Targets: []*statuspage.Target{tg}, Controllers: []statuspage.Controller{{Controller: c}},
				ShowData: show, SecretKeys: []string{"SITE_ID"},
			})
			require.NoError(t, err)
			for _, path := range []string{"/targets/device", "/controllers/device/objects/edge-1", "/"} {
				for _, asJSON := range []bool{false, true} {
					code, body := get(t, h, path, asJSON)
					require.Equal(t, 200, code, body)
					for _, secret := range composeSecrets {
						assert.NotContains(t, body, secret, "%s (JSON %v)", path, asJSON)
					}
				}
			}
			var tv statuspage.TargetView
			getJSON(t, h, "/targets/device", &tv)
			var ov statuspage.ObjectView
			getJSON(t, h, "/controllers/device/objects/edge-1", &ov)
			if !show {
				assert.Empty(t, tv.Data)
				assert.Empty(t, ov.Data)
				return
			}
			want := `{"services": {
				"db": {"image": "postgres:16", "environment": {"POSTGRES_USER": "app", "DB_PASSWORD": "[redacted]", "GITHUB_TOKEN": "[redacted]", "SITE_ID": "[redacted]"}},
				"api": {"image": "example/api:1.4", "environment": ["LOG_LEVEL=debug", "STRIPE_KEY=[redacted]", "DATABASE_URL=postgres://app:[redacted]@db/app", "SENTRY_DSN=[redacted]"],
					"labels": {"com.example.blob": "[sealed]"}}}}`
			assert.JSONEq(t, want, string(tv.Data), "the target, its secrets masked")
			assert.JSONEq(t, want, string(ov.Data), "the object's data, its secrets masked")
			_, html := get(t, h, "/targets/device", false)
			assert.Contains(t, html, `&#34;DB_PASSWORD&#34;: &#34;[redacted]&#34;`)
		})
	}
}

func TestMaskedDataKeepsWhatIsNotSecret(t *testing.T) {
	c := fleet(t)
	tests := []struct {
		name, data, want string
	}{
		{"kubernetes env", `[{"name":"API_TOKEN","value":"x"},{"name":"MODE","value":"y"}]`, `[{"name":"API_TOKEN","value":"[redacted]"},{"name":"MODE","value":"y"}]`},
		{"nested secret object", `{"credentials":{"user":"u","pass":"p"},"n":1.50}`, `{"credentials":"[redacted]","n":1.50}`},
		{"null secret", `{"password":null}`, `{"password":null}`},
		{"plain", `{"a":[1,"b",true]}`, `{"a":[1,"b",true]}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			key := "mask-" + strings.ReplaceAll(tt.name, " ", "-")
			require.NoError(t, c.Add(t.Context(), key, stateNew, json.RawMessage(tt.data)))
			h, err := statuspage.New(statuspage.Options{Controllers: []statuspage.Controller{{Controller: c}}, ShowData: true})
			require.NoError(t, err)
			var v statuspage.ObjectView
			getJSON(t, h, "/controllers/host/objects/"+key, &v)
			assert.JSONEq(t, tt.want, string(v.Data))
		})
	}
}
