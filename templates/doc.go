// Package templates holds no code: the directory holds the container
// stack (docker-compose.yaml, sq-server.Dockerfile, prometheus.yml and
// Grafana's provisioning under grafana/; README "Container stack"), and
// this package's tests check those files against the server that is
// built from the same tree:
//
//   - compose_test.go parses the compose file and the Dockerfile and
//     checks every flag, SQ_* variable, published port and dependency
//     they use against `sq-server serve --help`;
//   - dashboard_test.go checks that the dashboard's data sources are the
//     provisioned ones and that its queries parse (promtool);
//   - stack_test.go runs the compose file's three nodes as it configures
//     them, each in a network namespace (internal/clusternet) whose hosts
//     file resolves the service names, with a fake S3 for MinIO, an OTLP
//     sink for Jaeger and Debian's prometheus with prometheus.yml, and
//     checks that every query of the dashboard returns series.
package templates
