package network

import (
	"fmt"
	"sync"

	"github.com/runnel-dev/runnel/internal/ident"
)

// PartitionManager holds the result partitions produced on one TaskManager, so that local consumers and the
// TCP server can find them by ID.
type PartitionManager struct {
	mu         sync.Mutex
	partitions map[ident.PartitionID]*ResultPartition
}

// NewPartitionManager makes an empty manager.
func NewPartitionManager() *PartitionManager {
	return &PartitionManager{partitions: make(map[ident.PartitionID]*ResultPartition)}
}

// Register makes p findable. Pipelined (not reconnectable) partitions release and unregister themselves once
// fully consumed; reconnectable and blocking ones stay until Release is called by their owner (a blocking
// partition is re-read by every new attempt of its consumers).
func (m *PartitionManager) Register(p *ResultPartition) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, dup := m.partitions[p.id]; dup {
		return fmt.Errorf("partition %s is already registered", p.id)
	}
	m.partitions[p.id] = p
	if !p.opts.Reconnectable && !p.opts.Blocking {
		p.OnConsumed(func(p *ResultPartition) { m.Release(p.id) })
	}
	return nil
}

// Lookup returns the partition with the given ID.
func (m *PartitionManager) Lookup(id ident.PartitionID) (*ResultPartition, error) {
	m.mu.Lock()
	p := m.partitions[id]
	m.mu.Unlock()
	if p == nil {
		return nil, fmt.Errorf("partition %s: %w", id, ErrPartitionNotFound)
	}
	return p, nil
}

// CreateView attaches a reader to subpartition sub of partition id.
func (m *PartitionManager) CreateView(id ident.PartitionID, sub int, owner ident.Attempt, credit int, listener func()) (*View, error) {
	p, err := m.Lookup(id)
	if err != nil {
		return nil, err
	}
	return p.CreateView(sub, owner, credit, listener)
}

// CreateViewFrom is CreateView reading an in-flight log from the barrier of checkpoint from
// (ResultPartition.CreateViewFrom).
func (m *PartitionManager) CreateViewFrom(id ident.PartitionID, sub int, owner ident.Attempt, credit int, listener func(), from int64) (*View, error) {
	p, err := m.Lookup(id)
	if err != nil {
		return nil, err
	}
	return p.CreateViewFrom(sub, owner, credit, listener, from)
}

// Release releases and forgets the partition (deleting a blocking partition's spill files); unknown IDs are
// ignored.
func (m *PartitionManager) Release(id ident.PartitionID) {
	m.mu.Lock()
	p := m.partitions[id]
	delete(m.partitions, id)
	m.mu.Unlock()
	if p != nil {
		p.Release()
	}
}

// ReleaseProducedBy releases every partition produced by the given attempt.
func (m *PartitionManager) ReleaseProducedBy(producer ident.Attempt) {
	m.mu.Lock()
	var ps []*ResultPartition
	for id, p := range m.partitions {
		if id.Producer == producer {
			ps = append(ps, p)
			delete(m.partitions, id)
		}
	}
	m.mu.Unlock()
	for _, p := range ps {
		p.Release()
	}
}

// ReleaseAll releases every partition (TaskManager shutdown, job end).
func (m *PartitionManager) ReleaseAll() {
	m.mu.Lock()
	ps := m.partitions
	m.partitions = make(map[ident.PartitionID]*ResultPartition)
	m.mu.Unlock()
	for _, p := range ps {
		p.Release()
	}
}

// Len returns the number of registered partitions.
func (m *PartitionManager) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.partitions)
}
