package converge

import (
	"regexp"
	"slices"
)

// secretEnvKey is the default pattern of IsSecretEnv.
var secretEnvKey = regexp.MustCompile(`(?i)(PASSWORD|PASSWD|PASSPHRASE|SECRET|TOKEN|CREDENTIAL|API_?KEY|PRIVATE_?KEY|AUTH)|[_.-](PASS|PWD|PW|KEY|KEYS|DSN)$`)

// IsSecretEnv reports whether the values of the environment key are
// secret, the one rule every adapter redacts by (a container's
// environment, a command's): the key is listed in extra (exactly), or it
// matches the default pattern, case-insensitively:
//
//   - it contains PASSWORD, PASSWD, PASSPHRASE, SECRET, TOKEN, CREDENTIAL,
//     API_KEY or APIKEY, PRIVATE_KEY or PRIVATEKEY, or AUTH
//     (DB_PASSWORD, GITHUB_TOKEN, AWS_SECRET_ACCESS_KEY, CREDENTIALS_JSON,
//     OAUTH_CLIENT, ...);
//   - or it ends with _PASS, _PWD, _PW, _KEY, _KEYS or _DSN, after a _, .
//     or - (SMTP_PASS, DB_PWD, STRIPE_KEY, SENTRY_DSN).
//
// A key such as PWD (the working directory) or MONKEY is not secret by
// default; list it in extra to make it so.
func IsSecretEnv(key string, extra []string) bool {
	return secretEnvKey.MatchString(key) || slices.Contains(extra, key)
}
