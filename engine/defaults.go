package engine

import (
	"errors"
	"fmt"
)

// TopicDefaults are the server-wide defaults of new topics that may change
// while the engine runs (SetTopicDefaults): a topic created without a
// value takes the default in force at its creation, and keeps it (the
// resolved value is stored with the topic), as at any creation.
type TopicDefaults struct {
	// RetentionMs is retention.ms (ms; -1 unlimited); Options.RetentionMs.
	RetentionMs int64
	// RetentionBytes is retention.bytes of each partition (bytes; -1
	// unlimited); Options.RetentionBytes.
	RetentionBytes int64
	// LocalRetentionMs and LocalRetentionBytes are local.retention.ms and
	// local.retention.bytes (-2 the same as the whole log, -1 unlimited);
	// the Options fields of the same names.
	LocalRetentionMs    int64
	LocalRetentionBytes int64
}

// topicDefaults returns the defaults of Options o (after Defaults).
func (o *Options) topicDefaults() TopicDefaults {
	return TopicDefaults{RetentionMs: o.RetentionMs, RetentionBytes: o.RetentionBytes,
		LocalRetentionMs: o.LocalRetentionMs, LocalRetentionBytes: o.LocalRetentionBytes}
}

// validate reports every invalid default at once: the retentions -1 or
// positive, the local ones within them (checkLocalLimit).
func (d TopicDefaults) validate() error {
	var errs []error
	if d.RetentionMs == 0 || d.RetentionMs < -1 {
		errs = append(errs, fmt.Errorf("default retention.ms %d: want -1 (unlimited) or a positive duration in ms", d.RetentionMs))
	}
	if d.RetentionBytes == 0 || d.RetentionBytes < -1 {
		errs = append(errs, fmt.Errorf("default retention.bytes %d: want -1 (unlimited) or a positive size in bytes", d.RetentionBytes))
	}
	if err := checkLocalLimit(d.LocalRetentionMs, d.RetentionMs, localMsNames); err != nil {
		errs = append(errs, fmt.Errorf("default local.retention.ms %d: %w", d.LocalRetentionMs, err))
	}
	if err := checkLocalLimit(d.LocalRetentionBytes, d.RetentionBytes, localBytesNames); err != nil {
		errs = append(errs, fmt.Errorf("default local.retention.bytes %d: %w", d.LocalRetentionBytes, err))
	}
	return errors.Join(errs...)
}

// TopicDefaults returns the defaults new topics take now.
func (e *Engine) TopicDefaults() TopicDefaults { return *e.defaults.Load() }

// SetTopicDefaults replaces the defaults of topics created from now on
// (the server's SIGHUP reload); existing topics keep their config. An
// invalid set (retentions 0 or below -1, a local retention beyond its
// whole-log bound) is refused whole, with every problem named, and the
// current defaults stay.
func (e *Engine) SetTopicDefaults(d TopicDefaults) error {
	if err := d.validate(); err != nil {
		return fmt.Errorf("engine: %w", err)
	}
	e.defaults.Store(&d)
	return nil
}
