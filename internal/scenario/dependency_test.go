package scenario

import (
	"errors"
	"net/http"
	"syscall"
	"testing"
	"time"
)

// TestDependency checks the dependency's states on real sockets: up it
// answers 200; refusing, a new connection is refused; black-holed, a
// request on a new or a kept-alive connection gets no answer until the
// client's deadline; back up, it answers again on the same address.
func TestDependency(t *testing.T) {
	d, err := startDependency(listenLoopback)
	if err != nil {
		t.Fatal(err)
	}
	defer d.close()
	// One pool of connections, so that the black hole meets a kept-alive
	// one: the up checks have a generous deadline, which a slow loopback
	// request on a loaded machine does not reach; the black hole's client
	// gives up after 300ms.
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	short := &http.Client{Transport: tr, Timeout: 300 * time.Millisecond}
	get := func(client *http.Client) error {
		resp, err := client.Get(d.URL())
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return errors.New(resp.Status)
		}
		return nil
	}
	if err := get(client); err != nil {
		t.Fatalf("up: %v", err)
	}

	if err := d.down(OutageBlackhole); err != nil {
		t.Fatal(err)
	}
	for range 2 { // the kept-alive connection, then a new one
		start := time.Now()
		err := get(short)
		var timeout interface{ Timeout() bool }
		if !errors.As(err, &timeout) || !timeout.Timeout() {
			t.Errorf("black hole: %v, want a timeout", err)
		}
		if waited := time.Since(start); waited < 250*time.Millisecond {
			t.Errorf("black hole answered after %v, want no answer before the client's 300ms deadline", waited)
		}
	}
	if err := d.up(); err != nil {
		t.Fatal(err)
	}
	if err := get(client); err != nil {
		t.Fatalf("up after the black hole: %v", err)
	}

	if err := d.down(OutageRefuse); err != nil {
		t.Fatal(err)
	}
	if err := get(client); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("refuse: %v, want connection refused", err)
	}
	if err := d.up(); err != nil {
		t.Fatal(err)
	}
	if err := get(client); err != nil {
		t.Errorf("up after refusing: %v", err)
	}
}
