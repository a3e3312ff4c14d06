package engine

import (
	"fmt"

	"github.com/seedqueue/sq/api"
)

// resolveLocalRetention resolves c's local.retention.ms and
// local.retention.bytes (0: the server's default, d.LocalRetentionMs and
// d.LocalRetentionBytes) and checks them against retention.ms and
// retention.bytes, which c holds resolved: an INVALID_CONFIG *api.Error
// names the first bad one. The rules are Kafka's (KIP-405,
// LogConfig.validateRemoteStorageRetention*): below -2 is refused and,
// when the whole log is bounded, the local part may not be unlimited (-1)
// nor larger than it; -2 (the same as the whole log) always fits.
func resolveLocalRetention(c *TopicConfig, d TopicDefaults) error {
	if err := resolveLocalLimit(&c.LocalRetentionMs, d.LocalRetentionMs, c.RetentionMs, localMsNames); err != nil {
		return err
	}
	return resolveLocalLimit(&c.LocalRetentionBytes, d.LocalRetentionBytes, c.RetentionBytes, localBytesNames)
}

// localLimitNames name one local retention setting and its whole-log
// bound in messages.
type localLimitNames struct {
	local, total, flag, unit string
}

var (
	localMsNames    = localLimitNames{"local.retention.ms", "retention.ms", "--local-retention-ms", "a positive duration in ms"}
	localBytesNames = localLimitNames{"local.retention.bytes", "retention.bytes", "--local-retention-bytes", "a positive size in bytes"}
)

// resolveLocalLimit sets *local to def when it is 0 and checks it
// against total (resolved: -1 unlimited or positive).
func resolveLocalLimit(local *int64, def, total int64, n localLimitNames) error {
	from := ""
	if *local == 0 {
		*local = def
		from = fmt.Sprintf(" (the server's default, sq-server %s)", n.flag)
	}
	if err := checkLocalLimit(*local, total, n); err != nil {
		return api.NewError(api.CodeInvalidConfig, "%s %d%s: %v", n.local, *local, from, err)
	}
	return nil
}

// checkLocalLimit checks a local retention value against the whole
// log's bound total (-1 unlimited, else positive).
func checkLocalLimit(local, total int64, n localLimitNames) error {
	switch {
	case local < LocalRetentionDefault || local == 0:
		return fmt.Errorf("want -2 (the same as %s), -1 (unlimited) or %s", n.total, n.unit)
	case total < 0 || local == LocalRetentionDefault:
		return nil
	case local == -1:
		return fmt.Errorf("unlimited local retention with %s %d: the local part of a log cannot outlast the whole log; want -2 (the same as %s) or at most %d", n.total, total, n.total, total)
	case local > total:
		return fmt.Errorf("exceeds %s %d: the local part of a log cannot outlast the whole log; want -2 (the same as %s) or at most %d", n.total, total, n.total, total)
	}
	return nil
}
