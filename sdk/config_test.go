package sdk

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// unreachable is an address nothing listens on: a constructor that got
// past Validate would fail there with ErrConnection, not ErrInvalidConfig.
const unreachable = "127.0.0.1:1"

// TestConfigValidate: every impossible option of every Config is refused
// by its Validate and by its constructor with an error that wraps
// ErrInvalidConfig and names the field.
func TestConfigValidate(t *testing.T) {
	bad := "g\xff"
	type tc struct {
		name  string
		field string // the field the error must name
		check func() error
		ctor  func() error
	}
	var cases []tc
	client := func(name, field string, mut func(*ClientConfig)) {
		cfg := ClientConfig{Addr: unreachable}
		mut(&cfg)
		cases = append(cases, tc{name, "ClientConfig." + field, cfg.Validate, func() error {
			c, err := Dial(context.Background(), cfg)
			if err == nil {
				c.Close()
			}
			return err
		}})
	}
	producer := func(name, field string, mut func(*ProducerConfig)) {
		cfg := ProducerConfig{Addr: unreachable}
		mut(&cfg)
		cases = append(cases, tc{name, "ProducerConfig." + field, cfg.Validate, func() error {
			p, err := NewProducer(context.Background(), cfg)
			if err == nil {
				p.Close()
			}
			return err
		}})
	}
	batch := func(name, field string, mut func(*BatchProducerConfig)) {
		cfg := BatchProducerConfig{ProducerConfig: ProducerConfig{Addr: unreachable}}
		mut(&cfg)
		cases = append(cases, tc{name, "BatchProducerConfig." + field, cfg.Validate, func() error {
			p, err := NewBatchProducer(context.Background(), cfg)
			if err == nil {
				p.Close()
			}
			return err
		}})
	}
	consumer := func(name, field string, mut func(*ConsumerConfig)) {
		cfg := ConsumerConfig{Addr: unreachable, Topic: "t"}
		mut(&cfg)
		cases = append(cases, tc{name, "ConsumerConfig." + field, cfg.Validate, func() error {
			c, err := NewConsumer(context.Background(), cfg)
			if err == nil {
				c.Close()
			}
			return err
		}})
	}
	admin := func(name, field string, mut func(*AdminConfig)) {
		cfg := AdminConfig{GrpcConfig{Addr: unreachable}}
		mut(&cfg)
		cases = append(cases, tc{name, "AdminConfig." + field, cfg.Validate, func() error {
			a, err := NewAdmin(cfg)
			if err == nil {
				a.Close()
			}
			return err
		}})
	}
	grpcProducer := func(name, field string, mut func(*GrpcProducerConfig)) {
		cfg := GrpcProducerConfig{GrpcConfig: GrpcConfig{Addr: unreachable}}
		mut(&cfg)
		cases = append(cases, tc{name, "GrpcProducerConfig." + field, cfg.Validate, func() error {
			p, err := NewGrpcProducer(cfg)
			if err == nil {
				p.Close()
			}
			return err
		}})
	}
	grpcConsumer := func(name, field string, mut func(*GrpcConsumerConfig)) {
		cfg := GrpcConsumerConfig{GrpcConfig: GrpcConfig{Addr: unreachable, ConnectTimeout: time.Second}, Topic: "t"}
		mut(&cfg)
		cases = append(cases, tc{name, "GrpcConsumerConfig." + field, cfg.Validate, func() error {
			c, err := NewGrpcConsumer(context.Background(), cfg)
			if err == nil {
				c.Close()
			}
			return err
		}})
	}

	client("bad client id", "ClientID", func(c *ClientConfig) { c.ClientID = bad })
	client("negative dial timeout", "DialTimeout", func(c *ClientConfig) { c.DialTimeout = -time.Second })
	client("negative request timeout", "RequestTimeout", func(c *ClientConfig) { c.RequestTimeout = -1 })
	client("negative reconnect backoff", "ReconnectBackoff", func(c *ClientConfig) { c.ReconnectBackoff = -time.Millisecond })
	client("negative reconnect backoff max", "ReconnectBackoffMax", func(c *ClientConfig) { c.ReconnectBackoffMax = -time.Second })
	client("reconnect cap below first wait", "ReconnectBackoffMax", func(c *ClientConfig) {
		c.ReconnectBackoff, c.ReconnectBackoffMax = time.Second, time.Millisecond
	})

	producer("bad client id", "ClientID", func(c *ProducerConfig) { c.ClientID = bad })
	producer("retries -2", "Retries", func(c *ProducerConfig) { c.Retries = -2 })
	producer("negative retry backoff", "RetryBackoff", func(c *ProducerConfig) { c.RetryBackoff = -time.Millisecond })
	producer("retry cap below first wait", "RetryBackoffMax", func(c *ProducerConfig) {
		c.RetryBackoff, c.RetryBackoffMax = time.Second, 10*time.Millisecond
	})
	producer("negative metadata age", "MetadataMaxAge", func(c *ProducerConfig) { c.MetadataMaxAge = -time.Minute })
	producer("negative delivery timeout", "DeliveryTimeout", func(c *ProducerConfig) { c.DeliveryTimeout = -time.Second })
	producer("negative dial timeout", "DialTimeout", func(c *ProducerConfig) { c.DialTimeout = -time.Second })
	producer("negative request timeout", "RequestTimeout", func(c *ProducerConfig) { c.RequestTimeout = -time.Second })
	producer("negative reconnect backoff", "ReconnectBackoff", func(c *ProducerConfig) { c.ReconnectBackoff = -1 })

	batch("linger -5ms", "Linger", func(c *BatchProducerConfig) { c.Linger = -5 * time.Millisecond })
	batch("negative batch bytes", "BatchBytes", func(c *BatchProducerConfig) { c.BatchBytes = -1 })
	batch("negative batch records", "BatchRecords", func(c *BatchProducerConfig) { c.BatchRecords = -10 })
	batch("negative max in flight", "MaxInFlight", func(c *BatchProducerConfig) { c.MaxInFlight = -1 })
	batch("negative max in flight per partition", "MaxInFlightPerPartition", func(c *BatchProducerConfig) { c.MaxInFlightPerPartition = -4 })
	batch("negative buffer", "BufferBytes", func(c *BatchProducerConfig) { c.BufferBytes = -1 << 20 })
	batch("retries of the producer", "Retries", func(c *BatchProducerConfig) { c.Retries = -3 })
	batch("delivery timeout of the producer", "DeliveryTimeout", func(c *BatchProducerConfig) { c.DeliveryTimeout = -1 })

	consumer("empty topic", "Topic", func(c *ConsumerConfig) { c.Topic = "" })
	consumer("bad group", "ConsumerGroup", func(c *ConsumerConfig) { c.ConsumerGroup = bad })
	consumer("bad client id", "ClientID", func(c *ConsumerConfig) { c.ClientID = bad })
	consumer("group of 256 bytes", "ConsumerGroup", func(c *ConsumerConfig) { c.ConsumerGroup = strings.Repeat("g", 256) })
	consumer("session timeout below the server's bound", "SessionTimeout", func(c *ConsumerConfig) { c.SessionTimeout = 99 * time.Millisecond })
	consumer("session timeout above the server's bound", "SessionTimeout", func(c *ConsumerConfig) { c.SessionTimeout = 5*time.Minute + 1 })
	consumer("negative session timeout", "SessionTimeout", func(c *ConsumerConfig) { c.SessionTimeout = -time.Second })
	consumer("negative heartbeat", "HeartbeatInterval", func(c *ConsumerConfig) { c.HeartbeatInterval = -time.Second })
	consumer("negative auto-commit interval", "AutoCommitInterval", func(c *ConsumerConfig) { c.AutoCommitInterval = -time.Second })
	consumer("max poll interval -2ns", "MaxPollInterval", func(c *ConsumerConfig) { c.MaxPollInterval = -2 })
	consumer("max poll interval -1m", "MaxPollInterval", func(c *ConsumerConfig) { c.MaxPollInterval = -time.Minute })
	consumer("negative max poll records", "MaxPollRecords", func(c *ConsumerConfig) { c.MaxPollRecords = -1 })
	consumer("negative max wait", "MaxWait", func(c *ConsumerConfig) { c.MaxWait = -time.Millisecond })
	consumer("close timeout -1s", "CloseTimeout", func(c *ConsumerConfig) { c.CloseTimeout = -time.Second })
	consumer("negative dial timeout", "DialTimeout", func(c *ConsumerConfig) { c.DialTimeout = -time.Second })
	consumer("reconnect cap below first wait", "ReconnectBackoffMax", func(c *ConsumerConfig) {
		c.ReconnectBackoff, c.ReconnectBackoffMax = time.Second, time.Millisecond
	})

	admin("negative request timeout", "RequestTimeout", func(c *AdminConfig) { c.RequestTimeout = -time.Second })
	admin("negative connect timeout", "ConnectTimeout", func(c *AdminConfig) { c.ConnectTimeout = -time.Second })

	grpcProducer("negative request timeout", "RequestTimeout", func(c *GrpcProducerConfig) { c.RequestTimeout = -1 })
	grpcProducer("retries -2", "Retries", func(c *GrpcProducerConfig) { c.Retries = -2 })
	grpcProducer("negative retry backoff", "RetryBackoff", func(c *GrpcProducerConfig) { c.RetryBackoff = -1 })
	grpcProducer("negative delivery timeout", "DeliveryTimeout", func(c *GrpcProducerConfig) { c.DeliveryTimeout = -time.Second })
	grpcProducer("retry cap below first wait", "RetryBackoffMax", func(c *GrpcProducerConfig) {
		c.RetryBackoff, c.RetryBackoffMax = time.Second, time.Millisecond
	})
	grpcProducer("negative metadata age", "MetadataMaxAge", func(c *GrpcProducerConfig) { c.MetadataMaxAge = -1 })
	grpcProducer("negative batch bytes", "BatchBytesMax", func(c *GrpcProducerConfig) { c.BatchBytesMax = -1 })

	grpcConsumer("empty topic", "Topic", func(c *GrpcConsumerConfig) { c.Topic = "" })
	grpcConsumer("bad group", "ConsumerGroup", func(c *GrpcConsumerConfig) { c.ConsumerGroup = bad })
	grpcConsumer("bad client id", "ClientID", func(c *GrpcConsumerConfig) { c.ClientID = bad })
	grpcConsumer("group of 256 bytes", "ConsumerGroup", func(c *GrpcConsumerConfig) { c.ConsumerGroup = strings.Repeat("g", 256) })
	grpcConsumer("client id of 256 bytes", "ClientID", func(c *GrpcConsumerConfig) { c.ClientID = strings.Repeat("c", 256) })
	grpcConsumer("max poll interval -2ns", "MaxPollInterval", func(c *GrpcConsumerConfig) { c.MaxPollInterval = -2 })
	grpcConsumer("max poll interval -1m", "MaxPollInterval", func(c *GrpcConsumerConfig) { c.MaxPollInterval = -time.Minute })
	grpcConsumer("negative metadata age", "MetadataMaxAge", func(c *GrpcConsumerConfig) { c.MetadataMaxAge = -time.Second })
	grpcConsumer("session timeout too short", "SessionTimeout", func(c *GrpcConsumerConfig) { c.SessionTimeout = time.Millisecond })
	grpcConsumer("session timeout too long", "SessionTimeout", func(c *GrpcConsumerConfig) { c.SessionTimeout = time.Hour })
	grpcConsumer("negative heartbeat interval", "HeartbeatInterval", func(c *GrpcConsumerConfig) { c.HeartbeatInterval = -1 })
	grpcConsumer("start at a time", "StartFrom", func(c *GrpcConsumerConfig) { c.StartFrom = StartAtTime(time.Unix(1, 0)) })
	grpcConsumer("negative auto-commit interval", "AutoCommitInterval", func(c *GrpcConsumerConfig) { c.AutoCommitInterval = -1 })
	grpcConsumer("negative max poll records", "MaxPollRecords", func(c *GrpcConsumerConfig) { c.MaxPollRecords = -1 })
	grpcConsumer("negative max wait", "MaxWait", func(c *GrpcConsumerConfig) { c.MaxWait = -1 })
	grpcConsumer("negative retry backoff", "RetryBackoff", func(c *GrpcConsumerConfig) { c.RetryBackoff = -1 })
	grpcConsumer("close timeout -1s", "CloseTimeout", func(c *GrpcConsumerConfig) { c.CloseTimeout = -time.Second })
	grpcConsumer("negative connect timeout", "ConnectTimeout", func(c *GrpcConsumerConfig) { c.ConnectTimeout = -time.Second })

	for _, c := range cases {
		t.Run(c.field+"/"+c.name, func(t *testing.T) {
			for what, err := range map[string]error{"Validate": c.check(), "constructor": c.ctor()} {
				if !errors.Is(err, ErrInvalidConfig) {
					t.Fatalf("%s = %v, want ErrInvalidConfig", what, err)
				}
				if !strings.Contains(err.Error(), c.field+" ") {
					t.Errorf("%s = %q does not name %s", what, err, c.field)
				}
			}
		})
	}
}

// TestConfigValidateAccepts: the zero value, the named "off" values and
// the bounds themselves are valid.
func TestConfigValidateAccepts(t *testing.T) {
	for name, err := range map[string]error{
		"ClientConfig{}":            ClientConfig{}.Validate(),
		"ProducerConfig{}":          ProducerConfig{}.Validate(),
		"BatchProducerConfig{}":     BatchProducerConfig{}.Validate(),
		"ConsumerConfig{Topic}":     ConsumerConfig{Topic: "t"}.Validate(),
		"GrpcConfig{}":              GrpcConfig{}.Validate(),
		"AdminConfig{}":             AdminConfig{}.Validate(),
		"GrpcProducerConfig{}":      GrpcProducerConfig{}.Validate(),
		"GrpcConsumerConfig{Topic}": GrpcConsumerConfig{Topic: "t"}.Validate(),
		"named off values": BatchProducerConfig{Linger: LingerNone,
			ProducerConfig: ProducerConfig{Retries: RetriesNone}}.Validate(),
		"consumer off values and bounds": ConsumerConfig{Topic: "t", MaxPollInterval: MaxPollIntervalNone,
			CloseTimeout: CloseTimeoutNone, SessionTimeout: minSessionTimeout, StartFrom: StartAt(7)}.Validate(),
		"session timeout at the upper bound": ConsumerConfig{Topic: "t", SessionTimeout: maxSessionTimeout, ConsumerGroup: "grüppe"}.Validate(),
		"gRPC off values":                    GrpcConsumerConfig{Topic: "t", CloseTimeout: CloseTimeoutNone, StartFrom: StartLatest}.Validate(),
		"gRPC no retries":                    GrpcProducerConfig{Retries: RetriesNone}.Validate(),
		"AutoCommitMarked with AutoCommit":   ConsumerConfig{Topic: "t", ConsumerGroup: "g", AutoCommit: true, AutoCommitMarked: true}.Validate(),
		"backoff cap equal to first wait":    ProducerConfig{RetryBackoff: time.Second, RetryBackoffMax: time.Second}.Validate(),
		"ids of 255 bytes": GrpcConsumerConfig{Topic: "t", ConsumerGroup: strings.Repeat("g", 255),
			ClientID: strings.Repeat("c", 255)}.Validate(),
		// The configurations README.md and examples/ show.
		"README producer":       ProducerConfig{}.Validate(),
		"README consumer":       ConsumerConfig{Topic: "orders", ConsumerGroup: "my-group", AutoCommit: true}.Validate(),
		"README batch producer": BatchProducerConfig{Linger: 5 * time.Millisecond, BatchBytes: 1 << 20, OnError: func(BatchError) {}}.Validate(),
		"README gRPC consumer": GrpcConsumerConfig{GrpcConfig: GrpcConfig{Addr: "127.0.0.1:6060"}, Topic: "orders",
			ConsumerGroup: "billing", AutoCommit: true}.Validate(),
		"examples/batch_producer": BatchProducerConfig{ProducerConfig: ProducerConfig{Addr: "127.0.0.1:6064", ClientID: "example-batch-producer"},
			Linger: 5 * time.Millisecond, BatchBytes: 1 << 20, BufferBytes: 32 << 20}.Validate(),
		"examples/publisher": ProducerConfig{Addr: "127.0.0.1:6064", ClientID: "example-publisher"}.Validate(),
		"examples/subscriber": ConsumerConfig{Addr: "127.0.0.1:6064", ClientID: "example-subscriber", Topic: "orders",
			ConsumerGroup: "g", AutoCommit: true, StartFrom: StartEarliest}.Validate(),
	} {
		if err != nil {
			t.Errorf("%s: %v, want valid", name, err)
		}
	}
}

// TestConfigValidateAll: Validate reports every problem at once, and a
// refused negative points to the named value.
func TestConfigValidateAll(t *testing.T) {
	err := BatchProducerConfig{Linger: -time.Second, BatchBytes: -1,
		ProducerConfig: ProducerConfig{Retries: -5}}.Validate()
	for _, want := range []string{
		"BatchProducerConfig.Linger is -1s: want 0 (the default), a positive duration, or sdk.LingerNone for no linger",
		"BatchProducerConfig.BatchBytes is -1",
		"BatchProducerConfig.Retries is -5",
		"sdk.RetriesNone",
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate = %v, want it to say %q", err, want)
		}
	}
}
