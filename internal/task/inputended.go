package task

import "fmt"

// InputEndedInState reports whether a subtask's state blob records that the subtask's input had ended
// when the snapshot was taken (the entry finish.go adds to every snapshot after the end of the input).
// payload is the payload of the last blob the subtask's StateHandle lists: that blob holds the task's own
// entries whole, in an incremental chain too. A restore from such a snapshot reads and emits nothing and
// does not run EndInput again; when every subtask of a checkpoint had finished or ended its input, the job
// had already finished in it, which a restore reports.
func InputEndedInState(payload []byte) (bool, error) {
	m, err := decodeStates(payload)
	if err != nil {
		return false, fmt.Errorf("state blob: %w", err)
	}
	_, ok := m[inputEndedName]
	return ok, nil
}
