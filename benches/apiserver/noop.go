package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync/atomic"
)

// review is the part of an AdmissionReview the no-op reads and writes.
type review struct {
	APIVersion string                `json:"apiVersion"`
	Kind       string                `json:"kind"`
	Request    *struct{ UID string } `json:"request,omitempty"`
	Response   *response             `json:"response,omitempty"`
}

type response struct {
	UID     string `json:"uid"`
	Allowed bool   `json:"allowed"`
}

func noop(args []string) error {
	fs := flag.NewFlagSet("noop", flag.ExitOnError)
	listen := fs.String("listen", "127.0.0.1:0", "HTTPS listen address")
	cert := fs.String("cert", "", "serving certificate (PEM)")
	key := fs.String("key", "", "serving key (PEM)")
	dump := fs.String("dump", "", "write the first review's body to this file (a body to time a bare parse of)")
	fs.Parse(args)

	var calls atomic.Int64
	var dumped atomic.Bool
	dumped.Store(*dump == "")
	mux := http.NewServeMux()
	mux.HandleFunc("GET /calls", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, calls.Load())
	})
	mux.HandleFunc("POST /", func(w http.ResponseWriter, r *http.Request) {
		body := io.Reader(r.Body)
		// Only the first review is read whole, so the others cost what they always did.
		if !dumped.Load() && dumped.CompareAndSwap(false, true) {
			whole, err := io.ReadAll(r.Body)
			if err == nil {
				err = os.WriteFile(*dump, whole, 0o600)
			}
			if err != nil {
				fmt.Fprintln(os.Stderr, "noop: dump:", err)
			}
			body = bytes.NewReader(whole)
		}
		var in review
		if err := json.NewDecoder(body).Decode(&in); err != nil || in.Request == nil {
			http.Error(w, "not an AdmissionReview", http.StatusBadRequest)
			return
		}
		calls.Add(1)
		out := review{
			APIVersion: "admission.k8s.io/v1",
			Kind:       "AdmissionReview",
			Response:   &response{UID: in.Request.UID, Allowed: true},
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(out)
	})
	return http.ListenAndServeTLS(*listen, *cert, *key, mux)
}
