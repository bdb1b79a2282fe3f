package converge_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/convergekit/converge"
)

func TestIsSecretEnv(t *testing.T) {
	for key, secret := range map[string]bool{
		"DB_PASSWORD": true, "GITHUB_TOKEN": true, "github_token": true, "AWS_SECRET_ACCESS_KEY": true, "STRIPE_KEY": true,
		"SENTRY_DSN": true, "SMTP_PASS": true, "api_key": true, "CREDENTIALS_JSON": true, "OAUTH_CLIENT": true,
		"PWD": false, "MONKEY": false, "PATH": false, "HOME": false, "MODE": false, "PORT": false,
	} {
		assert.Equal(t, secret, converge.IsSecretEnv(key, nil), key)
	}
	assert.True(t, converge.IsSecretEnv("PIN", []string{"PIN"}))
	assert.False(t, converge.IsSecretEnv("PIN", []string{"PIN2"}))
}

func TestURLPasswords(t *testing.T) {
	tests := []struct {
		in       string
		want     []string
		redacted string
	}{
		{"postgres://app:pw@db/app", []string{"pw"}, "postgres://app:[redacted]@db/app"},
		{"see https://u:p%40ss@h:5432/x and redis://:tok@cache", []string{"p%40ss", "tok"}, "see https://u:[redacted]@h:5432/x and redis://:[redacted]@cache"},
		{"https://user@host/path", nil, "https://user@host/path"},
		{"no url here", nil, "no url here"},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, converge.URLPasswords(tt.in), tt.in)
		assert.Equal(t, tt.redacted, converge.RedactURLs(tt.in), tt.in)
	}
}
