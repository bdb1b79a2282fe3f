package converge

import (
	"regexp"
	"slices"
)

// Redacted is what replaces a secret value in messages and output.
const Redacted = "[redacted]"

// urlCredentials matches the userinfo of a URL with a password:
// scheme://user:password@ (the password up to the last @ of the authority).
var urlCredentials = regexp.MustCompile(`([A-Za-z][A-Za-z0-9+.-]*://[^\s/?#@:]*:)([^\s/?#]*)@`)

// URLPasswords returns the passwords of the URLs with credentials in s
// ("postgres://app:pw@db/app" holds "pw").
func URLPasswords(s string) []string {
	var out []string
	for _, m := range urlCredentials.FindAllStringSubmatch(s, -1) {
		if m[2] != "" {
			out = append(out, m[2])
		}
	}
	return out
}

// RedactURLs replaces the password of every URL with credentials in s by
// Redacted ("postgres://app:pw@db/app" becomes
// "postgres://app:[redacted]@db/app").
func RedactURLs(s string) string {
	return urlCredentials.ReplaceAllString(s, "${1}"+Redacted+"@")
}

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
