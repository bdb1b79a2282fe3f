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
