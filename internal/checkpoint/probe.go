package checkpoint

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
)

// probePrefix starts the name of a probe object; no checkpoint directory looks like it.
const probePrefix = "_runnel-probe-"

// WriteProbe writes a probe: nonce under a name at the top of the storage. Every process of a cluster
// reads it back (CheckProbe) before it writes a checkpoint, which proves they all reach one storage.
func (s *Storage) WriteProbe(ctx context.Context, name string, nonce []byte) error {
	if err := s.b.Put(ctx, probePrefix+name, nonce); err != nil {
		return fmt.Errorf("write probe %s into %s: %w", probePrefix+name, s.location, err)
	}
	return nil
}

// CheckProbe reads the probe name back and compares it with nonce.
func (s *Storage) CheckProbe(ctx context.Context, name string, nonce []byte) error {
	r, _, err := s.b.Get(ctx, probePrefix+name)
	if err != nil {
		return fmt.Errorf("read probe %s from %s: %w", probePrefix+name, s.location, err)
	}
	defer r.Close()
	got, err := io.ReadAll(io.LimitReader(r, 1024))
	if err != nil {
		return fmt.Errorf("read probe %s from %s: %w", probePrefix+name, s.location, err)
	}
	if !bytes.Equal(got, nonce) {
		return fmt.Errorf("probe %s in %s holds another nonce: another JobManager's", probePrefix+name, s.location)
	}
	return nil
}

// DeleteProbe removes a probe; one that is gone already is no error.
func (s *Storage) DeleteProbe(ctx context.Context, name string) error {
	if err := s.b.Delete(ctx, probePrefix+name); err != nil && !errors.Is(err, ErrNotFound) {
		return fmt.Errorf("delete probe %s from %s: %w", probePrefix+name, s.location, err)
	}
	return nil
}
