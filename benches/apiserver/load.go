package main

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"
)

// paths is a repeatable -path flag.
type paths []string

func (p *paths) String() string     { return strings.Join(*p, ",") }
func (p *paths) Set(v string) error { *p = append(*p, v); return nil }

func load(args []string) error {
	fs := flag.NewFlagSet("load", flag.ExitOnError)
	server := fs.String("server", "", "kube-apiserver URL, e.g. https://127.0.0.1:6443")
	caFile := fs.String("ca", "", "CA that signed the apiserver's certificate")
	certFile := fs.String("cert", "", "client certificate of the user who writes")
	keyFile := fs.String("key", "", "its key")
	annotation := fs.String("annotation", "bench.driftguard.io/seq", "the annotation each write sets")
	writes := fs.Int("writes", 300, "measured writes, in total over all writers")
	warmup := fs.Int("warmup", 20, "writes before measuring, not counted")
	writers := fs.Int("writers", 1, "concurrent writers; writer i patches path i modulo the number of paths")
	var objects paths
	fs.Var(&objects, "path", "API path of an object to patch (repeatable)")
	fs.Parse(args)
	if *server == "" || len(objects) == 0 {
		return fmt.Errorf("load needs -server and at least one -path")
	}

	client, err := newClient(*caFile, *certFile, *keyFile)
	if err != nil {
		return err
	}
	patch := func(path string, seq int) (time.Duration, error) {
		body, _ := json.Marshal(map[string]any{"metadata": map[string]any{
			"annotations": map[string]string{*annotation: fmt.Sprint(seq)},
		}})
		req, err := http.NewRequest(http.MethodPatch, *server+path+"?fieldManager=bench", bytes.NewReader(body))
		if err != nil {
			return 0, err
		}
		req.Header.Set("Content-Type", "application/merge-patch+json")
		req.Header.Set("Accept", "application/json")
		start := time.Now()
		resp, err := client.Do(req)
		if err != nil {
			return 0, err
		}
		answer, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		elapsed := time.Since(start)
		if resp.StatusCode != http.StatusOK {
			return elapsed, fmt.Errorf("PATCH %s: %s: %s", path, resp.Status, answer)
		}
		return elapsed, nil
	}

	// Every write sets a new value, so every write changes its object.
	seq := int(time.Now().UnixNano() / 1000)
	for i := range *warmup {
		if _, err := patch(objects[i%len(objects)], seq+i); err != nil {
			return fmt.Errorf("warm-up: %w", err)
		}
	}
	seq += *warmup

	var (
		mu        sync.Mutex
		latencies []time.Duration
		errors    int
		firstErr  error
		wg        sync.WaitGroup
	)
	for w := range *writers {
		n := *writes / *writers
		if w < *writes%*writers {
			n++
		}
		wg.Add(1)
		go func(w, n int) {
			defer wg.Done()
			own := make([]time.Duration, 0, n)
			failed := 0
			var failure error
			for i := range n {
				k := w + i*(*writers) // this write's index over all writers
				d, err := patch(objects[k%len(objects)], seq+k)
				if err != nil {
					failed++
					failure = err
					continue
				}
				own = append(own, d)
			}
			mu.Lock()
			defer mu.Unlock()
			latencies = append(latencies, own...)
			errors += failed
			if firstErr == nil {
				firstErr = failure
			}
		}(w, n)
	}
	wg.Wait()
	if firstErr != nil {
		fmt.Fprintln(os.Stderr, "first error:", firstErr)
	}

	slices.Sort(latencies)
	return json.NewEncoder(os.Stdout).Encode(map[string]any{
		"count":  len(latencies),
		"errors": errors,
		"p50_us": percentile(latencies, 0.50).Microseconds(),
		"p99_us": percentile(latencies, 0.99).Microseconds(),
	})
}

// percentile of sorted latencies, nearest rank; 0 when there are none.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(p*float64(len(sorted))+0.999999) - 1
	return sorted[max(0, min(rank, len(sorted)-1))]
}

// newClient speaks HTTP/2 over keep-alive TLS with a client certificate, as
// kubectl and client-go do: one connection, writers multiplexed on it.
func newClient(caFile, certFile, keyFile string) (*http.Client, error) {
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, err
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s: no certificate", caFile)
	}
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, err
	}
	return &http.Client{
		Timeout: 30 * time.Second,
		Transport: &http.Transport{
			TLSClientConfig:   &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{pair}},
			ForceAttemptHTTP2: true,
		},
	}, nil
}
