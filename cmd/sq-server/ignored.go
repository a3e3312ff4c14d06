package main

import "log/slog"

// ignoredFlag is a flag that this build accepts (so that the seed
// README's command lines and environments start the server) but does not
// act on.
type ignoredFlag struct {
	flag, env string
	value     func(*config) string
	part      string // what the flag configures
}

// ignoredFlags are every accepted-and-ignored flag: --s3-endpoint and
// --s3-region without --s3-bucket, which turns tiered storage on.
var ignoredFlags = []ignoredFlag{
	{"--s3-endpoint", "SQ_S3_ENDPOINT", func(c *config) string { return ifNoBucket(c, c.S3Endpoint) }, "tiered storage (needs --s3-bucket)"},
	{"--s3-region", "SQ_S3_REGION", func(c *config) string { return ifNoBucket(c, c.S3Region) }, "tiered storage (needs --s3-bucket)"},
}

// ifNoBucket returns v when --s3-bucket is not set, else "".
func ifNoBucket(c *config, v string) string {
	if c.S3Bucket != "" {
		return ""
	}
	return v
}

// logIgnored logs one INFO line for each ignored flag that is set (by its
// flag or its variable), naming the flag, its variable, its value and the
// part of SQ it would configure.
func logIgnored(c *config, log *slog.Logger) {
	for _, f := range ignoredFlags {
		if v := f.value(c); v != "" {
			log.Info("not served in this build; setting accepted and ignored",
				"flag", f.flag, "env", f.env, "value", v, "part", f.part)
		}
	}
}
