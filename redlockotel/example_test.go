package redlockotel_test

import (
	"bufio"
	"context"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/d3b93e30/redlock"
	"github.com/d3b93e30/redlock/redlockotel"
)

// The adapter wired to a Prometheus exporter: the lock's metrics are served
// on /metrics. Spans go to the global TracerProvider (a no-op until one is
// set with otel.SetTracerProvider).
func Example_prometheus() {
	registry := prometheus.NewRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(registry), otelprom.WithoutScopeInfo(), otelprom.WithoutTargetInfo())
	if err != nil {
		log.Fatal(err)
	}
	meters := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	defer meters.Shutdown(context.Background())

	obs, err := redlockotel.New(redlockotel.WithMeterProvider(meters))
	if err != nil {
		log.Fatal(err)
	}
	var urls []string
	for range 3 { // three in-memory Redis nodes for the example
		m := miniredis.NewMiniRedis()
		if err := m.Start(); err != nil {
			log.Fatal(err)
		}
		defer m.Close()
		m.ClockTTL(true) // keys expire on the wall clock, as on a Redis server
		urls = append(urls, "redis://"+m.Addr())
	}
	client, err := redlock.Dial(urls, redlock.WithObserver(obs))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	// In a service: http.Handle("/metrics", promhttp.HandlerFor(registry, promhttp.HandlerOpts{})).
	srv := httptest.NewServer(promhttp.HandlerFor(registry, promhttp.HandlerOpts{}))
	defer srv.Close()

	ctx := context.Background()
	err = client.Do(ctx, "report:42", 10*time.Second, func(ctx context.Context, _ *redlock.Lease) error {
		// Another worker (not this ctx, which would make it reentrant) is refused.
		_, err := client.TryAcquire(context.Background(), "report:42", 10*time.Second)
		fmt.Println("second worker:", err != nil)
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}

	resp, err := http.Get(srv.URL)
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	lines := bufio.NewScanner(resp.Body)
	for lines.Scan() {
		if strings.HasPrefix(lines.Text(), "redlock_operations_total{") {
			fmt.Println(lines.Text())
		}
	}
	// Unordered output:
	// second worker: true
	// redlock_operations_total{redlock_operation_name="acquire"} 1
	// redlock_operations_total{error_type="not_acquired",redlock_operation_name="acquire"} 1
	// redlock_operations_total{redlock_operation_name="do"} 1
	// redlock_operations_total{redlock_operation_name="release"} 1
}
