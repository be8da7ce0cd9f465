package rpc

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/runnel-dev/runnel/internal/barrier"
	"github.com/runnel-dev/runnel/internal/checkpoint"
	"github.com/runnel-dev/runnel/internal/deploy"
	"github.com/runnel-dev/runnel/internal/jobcore"
	"github.com/runnel-dev/runnel/internal/protocol"
	"github.com/runnel-dev/runnel/internal/rpc/pb"
)

// bodyKind is one body type of the contract and the direction it travels in.
type bodyKind struct {
	zero any
	toTM bool // JobManager -> TaskManager
}

// bodyKinds lists every body of the contract. A body type added to protocol or jobcore and sent on a
// session belongs here: the tests below then fill every field of it and check that each one crosses.
var bodyKinds = []bodyKind{
	{protocol.Registered{}, true},
	{protocol.Refused{}, true},
	{protocol.Heartbeat{}, true},
	{protocol.SetupJob{}, true},
	{protocol.ReleaseJob{}, true},
	{protocol.AdoptJob{}, true},
	{protocol.DropJob{}, true},
	{jobcore.Deploy{}, true},
	{jobcore.CancelTask{}, true},
	{jobcore.ReleasePartitions{}, true},
	{jobcore.TriggerCheckpoint{}, true},
	{jobcore.AbortCheckpoint{}, true},
	{jobcore.NotifyCheckpointComplete{}, true},
	{jobcore.SampleSubpartitions{}, true},
	{jobcore.Probe{}, true},
	{protocol.Register{}, false},
	{protocol.Heartbeat{}, false},
	{protocol.Leaving{}, false},
	{protocol.NewLeader{}, false},
	{jobcore.JobSetUp{}, false},
	{jobcore.TaskUpdate{}, false},
	{jobcore.Observation{}, false},
	{jobcore.CheckpointAck{}, false},
	{jobcore.CheckpointDecline{}, false},
	{jobcore.Counters{}, false},
	{jobcore.SubpartitionsSampled{}, false},
	{protocol.Accumulators{}, false},
	{jobcore.TaskManagerAlive{}, false},
}

// filler fills values of any contract type through reflection, so that a field added to a type is filled
// (and must then cross) without the test being told. full makes every value non-zero: slices and maps
// of one to three elements, pointers set, numbers and strings not zero.
type filler struct {
	next func(n uint64) uint64 // a number in [0, n)
	full bool
}

var (
	errorType    = reflect.TypeFor[error]()
	stateType    = reflect.TypeFor[deploy.State]()
	obsKindType  = reflect.TypeFor[deploy.ObservationKind]()
	failKindType = reflect.TypeFor[jobcore.FailureKind]()
	replayType   = reflect.TypeFor[jobcore.ReplayFailure]()
	modeType     = reflect.TypeFor[barrier.Mode]()
)

func (f *filler) count() int {
	if f.full {
		return 1 + int(f.next(3))
	}
	return int(f.next(4))
}

func (f *filler) bits() uint64 {
	v := f.next(1<<63) ^ f.next(2)<<63
	if f.full && v == 0 {
		v = 1
	}
	return v
}

func (f *filler) str() string {
	n := f.count()
	b := make([]byte, 0, n*4)
	for range n {
		// Any bytes, invalid UTF-8 included: the wire must carry Go strings as they are.
		b = append(b, byte(1+f.next(255)), byte(f.next(256)))
	}
	return string(b)
}

func (f *filler) fill(v reflect.Value) {
	t := v.Type()
	switch t {
	case stateType:
		v.SetInt(int64(f.next(uint64(deploy.Failed) + 1)))
		return
	case obsKindType:
		if f.full {
			v.SetUint(1 + f.next(uint64(deploy.DuplicatesDropped)))
		} else {
			v.SetUint(f.next(uint64(deploy.DuplicatesDropped) + 1))
		}
		return
	case failKindType:
		v.SetUint(f.next(2))
		return
	case replayType:
		// Never none when full: a field that does not cross comes back none and fails the trip.
		if f.full {
			v.SetUint(1 + f.next(uint64(jobcore.MaxReplayFailure)))
		} else {
			v.SetUint(f.next(uint64(jobcore.MaxReplayFailure) + 1))
		}
		return
	case modeType:
		v.SetUint(f.next(2))
		return
	case errorType:
		if !f.full && f.next(3) == 0 {
			return
		}
		var err error = errors.New(f.str())
		if f.next(2) == 0 {
			err = fmt.Errorf("%s: %w", f.str(), checkpoint.ErrTaskNotReady)
		}
		v.Set(reflect.ValueOf(err))
		return
	}
	switch t.Kind() {
	case reflect.Bool:
		v.SetBool(f.full || f.next(2) == 1)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(int64(f.bits()) >> (64 - t.Bits()))
		if f.full && v.Int() == 0 {
			v.SetInt(1)
		}
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		v.SetUint(f.bits() >> (64 - t.Bits()))
		if f.full && v.Uint() == 0 {
			v.SetUint(1)
		}
	case reflect.String:
		v.SetString(f.str())
	case reflect.Array:
		for i := range v.Len() {
			f.fill(v.Index(i))
		}
	case reflect.Slice:
		n := f.count()
		s := reflect.MakeSlice(t, n, n)
		for i := range n {
			f.fill(s.Index(i))
		}
		v.Set(s)
	case reflect.Map:
		n := f.count()
		m := reflect.MakeMapWithSize(t, n)
		for range n {
			k, e := reflect.New(t.Key()).Elem(), reflect.New(t.Elem()).Elem()
			f.fill(k)
			f.fill(e)
			m.SetMapIndex(k, e)
		}
		v.Set(m)
	case reflect.Pointer:
		if !f.full && f.next(3) == 0 {
			return
		}
		p := reflect.New(t.Elem())
		f.fill(p.Elem())
		v.Set(p)
	case reflect.Struct:
		for i := range v.NumField() {
			if t.Field(i).IsExported() {
				f.fill(v.Field(i))
			}
		}
	case reflect.Func:
		// deploy.RestoreSpec.Read: set, so the test sees it does not cross.
		v.Set(reflect.MakeFunc(t, func([]reflect.Value) []reflect.Value { panic("never called") }))
	default:
		panic(fmt.Sprintf("filler: cannot fill %s", t))
	}
}

// randomFiller draws from a seeded generator.
func randomFiller(seed uint64, full bool) *filler {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	return &filler{next: r.Uint64N, full: full}
}

// bytesFiller draws from fuzz input: each number is the next 8 bytes (zero once they run out).
func bytesFiller(data []byte) *filler {
	return &filler{next: func(n uint64) uint64 {
		var v uint64
		for i := 0; i < 8 && len(data) > 0; i++ {
			v, data = v<<8|uint64(data[0]), data[1:]
		}
		return v % n
	}}
}

// errorFacts is what survives of an error: its text, and whether it is a checkpoint.ErrTaskNotReady.
type errorFacts struct {
	set      bool
	text     string
	notReady bool
}

func factsOf(err error) errorFacts {
	if err == nil {
		return errorFacts{}
	}
	return errorFacts{true, err.Error(), errors.Is(err, checkpoint.ErrTaskNotReady)}
}

// crossing returns what body is expected to be after the trip: the documented non-crossing fields
// cleared (Failure.Cause, RestoreSpec.Read, the TaskManager ids the session layer fills), errors taken out
// as facts, and empty slices and maps nil.
func crossing(body any) (any, errorFacts) {
	var facts errorFacts
	switch b := body.(type) {
	case jobcore.TaskUpdate:
		if b.Failure != nil {
			f := *b.Failure
			f.Cause = nil
			b.Failure = &f
		}
		body = b
	case jobcore.Deploy:
		if r := b.Deployment.Restore; r != nil {
			c := *r
			c.Read = nil
			b.Deployment.Restore = &c
		}
		body = b
	case jobcore.JobSetUp:
		b.TaskManager = 0
		facts, b.Err = factsOf(b.Err), nil
		facts.notReady = false // only a decline keeps it
		body = b
	case jobcore.TaskManagerAlive:
		b.TaskManager = 0
		body = b
	case jobcore.CheckpointDecline:
		facts, b.Err = factsOf(b.Err), nil
		body = b
	}
	v := reflect.New(reflect.TypeOf(body)).Elem()
	v.Set(reflect.ValueOf(body))
	return nilEmpty(v).Interface(), facts
}

// nilEmpty returns a deep copy of v with every empty slice, map and byte string nil.
func nilEmpty(v reflect.Value) reflect.Value {
	out := reflect.New(v.Type()).Elem()
	switch v.Kind() {
	case reflect.Slice:
		if v.Len() == 0 {
			return out
		}
		s := reflect.MakeSlice(v.Type(), v.Len(), v.Len())
		for i := range v.Len() {
			s.Index(i).Set(nilEmpty(v.Index(i)))
		}
		return s
	case reflect.Map:
		if v.Len() == 0 {
			return out
		}
		m := reflect.MakeMapWithSize(v.Type(), v.Len())
		for it := v.MapRange(); it.Next(); {
			m.SetMapIndex(it.Key(), nilEmpty(it.Value()))
		}
		return m
	case reflect.Pointer:
		if v.IsNil() {
			return out
		}
		p := reflect.New(v.Type().Elem())
		p.Elem().Set(nilEmpty(v.Elem()))
		return p
	case reflect.Struct:
		out.Set(v)
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				out.Field(i).Set(nilEmpty(v.Field(i)))
			}
		}
		return out
	}
	out.Set(v)
	return out
}

// trip sends env the way a transport does: encode, marshal, unmarshal, decode.
func trip(env protocol.Envelope, toTM bool) (protocol.Envelope, error) {
	if toTM {
		m, err := encodeToTaskManager(env)
		if err != nil {
			return protocol.Envelope{}, err
		}
		b, err := proto.Marshal(m)
		if err != nil {
			return protocol.Envelope{}, err
		}
		back := &pb.ToTaskManager{}
		if err := proto.Unmarshal(b, back); err != nil {
			return protocol.Envelope{}, err
		}
		out, _, err := decodeToTaskManager(back)
		return out, err
	}
	m, err := encodeFromTaskManager(env)
	if err != nil {
		return protocol.Envelope{}, err
	}
	b, err := proto.Marshal(m)
	if err != nil {
		return protocol.Envelope{}, err
	}
	back := &pb.FromTaskManager{}
	if err := proto.Unmarshal(b, back); err != nil {
		return protocol.Envelope{}, err
	}
	out, _, err := decodeFromTaskManager(back)
	return out, err
}

// checkTrip fails t unless env survives the trip but for the documented non-crossing fields.
func checkTrip(t *testing.T, env protocol.Envelope, toTM bool) {
	t.Helper()
	got, err := trip(env, toTM)
	if err != nil {
		t.Fatalf("trip of %T: %v", env.Body, err)
	}
	want, wantFacts := crossing(env.Body)
	gotBody, gotFacts := crossing(got.Body)
	if got.Job != env.Job {
		t.Errorf("%T: job %s came back as %s", env.Body, env.Job, got.Job)
	}
	if gotFacts != wantFacts {
		t.Errorf("%T: error %+v came back as %+v", env.Body, wantFacts, gotFacts)
	}
	if !reflect.DeepEqual(gotBody, want) {
		t.Errorf("%T did not survive the trip:\n sent %#v\n  got %#v", env.Body, want, gotBody)
	}
}

// zeroFields lists the paths of fields in v that are zero: a fully filled value has none but the
// non-crossing ones.
func zeroFields(v reflect.Value, path string, out *[]string) {
	switch v.Kind() {
	case reflect.Struct:
		for i := range v.NumField() {
			f := v.Type().Field(i)
			if f.IsExported() {
				zeroFields(v.Field(i), path+"."+f.Name, out)
			}
		}
	case reflect.Pointer:
		if v.IsNil() {
			*out = append(*out, path)
			return
		}
		zeroFields(v.Elem(), path, out)
	case reflect.Slice:
		if v.Len() == 0 {
			*out = append(*out, path)
		}
		for i := range v.Len() {
			zeroFields(v.Index(i), fmt.Sprintf("%s[%d]", path, i), out)
		}
	default:
		if v.IsZero() && v.Type() != obsKindType && v.Type() != stateType && v.Type() != failKindType && v.Type() != modeType {
			*out = append(*out, path)
		}
	}
}

// TestEveryBodyCrosses sends one fully populated value of every body kind (every field at every depth
// set, found through reflection) through encode, marshal, unmarshal and decode, and compares.
func TestEveryBodyCrosses(t *testing.T) {
	for i, k := range bodyKinds {
		name := fmt.Sprintf("%T", k.zero)
		if k.toTM {
			name += "/to-tm"
		} else {
			name += "/from-tm"
		}
		t.Run(name, func(t *testing.T) {
			f := randomFiller(uint64(i)+1, true)
			v := reflect.New(reflect.TypeOf(k.zero)).Elem()
			f.fill(v)
			var zero []string
			zeroFields(v, "", &zero)
			if len(zero) > 0 {
				t.Fatalf("the filler left fields zero: %v", zero)
			}
			var job protocol.JobID
			f.fill(reflect.ValueOf(&job).Elem())
			checkTrip(t, protocol.Envelope{Job: job, Body: v.Interface()}, k.toTM)
			// And as a session message, with the zero job.
			checkTrip(t, protocol.Envelope{Body: v.Interface()}, k.toTM)
		})
	}
}

// TestErrorsCrossAsFacts pins the error rules: nil stays nil, an empty text is still an error, and a
// decline keeps errors.Is(err, checkpoint.ErrTaskNotReady) only when it held.
func TestErrorsCrossAsFacts(t *testing.T) {
	for _, tc := range []struct {
		name     string
		body     any
		get      func(any) error
		notReady bool
	}{
		{"setup ok", jobcore.JobSetUp{TaskManager: 3}, func(b any) error { return b.(jobcore.JobSetUp).Err }, false},
		{"setup empty text", jobcore.JobSetUp{Err: errors.New("")}, func(b any) error { return b.(jobcore.JobSetUp).Err }, false},
		{"decline not ready", jobcore.CheckpointDecline{ID: 4, Err: fmt.Errorf("map[0]: %w", checkpoint.ErrTaskNotReady), NotReady: true},
			func(b any) error { return b.(jobcore.CheckpointDecline).Err }, true},
		{"decline failed", jobcore.CheckpointDecline{ID: 4, Err: errors.New("disk full")}, func(b any) error { return b.(jobcore.CheckpointDecline).Err }, false},
		{"decline nil", jobcore.CheckpointDecline{ID: 4}, func(b any) error { return b.(jobcore.CheckpointDecline).Err }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := trip(protocol.Envelope{Body: tc.body}, false)
			if err != nil {
				t.Fatal(err)
			}
			sent, back := tc.get(tc.body), tc.get(got.Body)
			if (sent == nil) != (back == nil) {
				t.Fatalf("error %v came back as %v", sent, back)
			}
			if sent == nil {
				return
			}
			if back.Error() != sent.Error() {
				t.Errorf("text %q came back as %q", sent, back)
			}
			if errors.Is(back, checkpoint.ErrTaskNotReady) != tc.notReady {
				t.Errorf("errors.Is(ErrTaskNotReady) = %v after the trip, want %v", !tc.notReady, tc.notReady)
			}
		})
	}
}

// TestBodiesThatCannotCross: a body of an unknown type, a pointer body, a body sent the wrong way, or an
// enumeration outside its constants is an error naming the problem.
func TestBodiesThatCannotCross(t *testing.T) {
	for _, tc := range []struct {
		body any
		toTM bool
		want string
	}{
		{jobcore.SetupJob{}, true, "jobcore.SetupJob cannot be sent to a TaskManager"},
		{&jobcore.Deploy{}, true, "*jobcore.Deploy cannot be sent to a TaskManager"},
		{jobcore.Counters{}, true, "jobcore.Counters cannot be sent to a TaskManager"},
		{jobcore.Deploy{}, false, "jobcore.Deploy cannot be sent to a JobManager"},
		{nil, false, "<nil> cannot be sent to a JobManager"},
		{func() {}, false, "func() cannot be sent to a JobManager"},
		{jobcore.TriggerCheckpoint{ID: 7, Mode: 9}, true, "TriggerCheckpoint 7: unknown checkpoint mode 9"},
		{jobcore.TaskUpdate{State: 42}, false, "unknown task state 42"},
		{jobcore.TaskUpdate{State: deploy.Failed, Failure: &jobcore.Failure{Kind: 5}}, false, "unknown failure kind 5"},
		{jobcore.TaskUpdate{State: deploy.Failed, Failure: &jobcore.Failure{Replay: jobcore.MaxReplayFailure + 1}}, false, "unknown replay failure 5"},
		{jobcore.Observation{Kind: 9}, false, "unknown kind 9"},
	} {
		t.Run(fmt.Sprintf("%T", tc.body), func(t *testing.T) {
			_, err := trip(protocol.Envelope{Body: tc.body}, tc.toTM)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// TestMalformedWire: what a peer of another build might send is refused, not misread.
func TestMalformedWire(t *testing.T) {
	for _, tc := range []struct {
		name string
		toTM proto.Message
		from proto.Message
		want string
	}{
		{name: "short job id", from: &pb.FromTaskManager{Job: []byte{1, 2, 3}, Body: &pb.FromTaskManager_Heartbeat{Heartbeat: &pb.Heartbeat{}}},
			want: "job id of 3 bytes, want 16"},
		{name: "no body", from: &pb.FromTaskManager{}, want: "with body <nil>"},
		{name: "state", from: &pb.FromTaskManager{Body: &pb.FromTaskManager_TaskUpdate{TaskUpdate: &pb.TaskUpdate{State: 99}}},
			want: "unknown task state 99"},
		{name: "replay failure", from: &pb.FromTaskManager{Body: &pb.FromTaskManager_TaskUpdate{TaskUpdate: &pb.TaskUpdate{State: pb.TaskState_TASK_STATE_FAILED,
			Failure: &pb.Failure{Replay: 9}}}}, want: "unknown replay failure 9"},
		{name: "observation kind", from: &pb.FromTaskManager{Body: &pb.FromTaskManager_Observation{Observation: &pb.Observation{Kind: -1}}},
			want: "unknown kind -1"},
		{name: "build sum", from: &pb.FromTaskManager{Body: &pb.FromTaskManager_Register{Register: &pb.Register{Build: &pb.Build{Sum: []byte{1}}}}},
			want: "build sum of 1 bytes, want 32"},
		{name: "mode", toTM: &pb.ToTaskManager{Body: &pb.ToTaskManager_TriggerCheckpoint{TriggerCheckpoint: &pb.TriggerCheckpoint{Id: 2, Mode: 3}}},
			want: "unknown checkpoint mode 3"},
		{name: "credential", toTM: &pb.ToTaskManager{Body: &pb.ToTaskManager_Deploy{Deploy: &pb.Deploy{Inputs: []*pb.InputSpec{{
			Channels: []*pb.ChannelSpec{{Credential: make([]byte, 31)}}}}}}}, want: "credential of 31 bytes, want 32"},
		{name: "graph", toTM: &pb.ToTaskManager{Body: &pb.ToTaskManager_SetupJob{SetupJob: &pb.SetupJob{Graph: make([]byte, 33)}}},
			want: "fingerprint of 33 bytes, want 32"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			if tc.toTM != nil {
				_, _, err = decodeToTaskManager(tc.toTM.(*pb.ToTaskManager))
			} else {
				_, _, err = decodeFromTaskManager(tc.from.(*pb.FromTaskManager))
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// FuzzRoundTrip checks two things on every input. As a seed for values: a body of every kind filled
// from the input (zero, empty and absent parts included) survives the trip. As wire bytes: whatever a
// peer sends either is refused or decodes to a value that survives the trip itself; nothing panics.
func FuzzRoundTrip(f *testing.F) {
	for i := range bodyKinds {
		f.Add([]byte{byte(i), 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 0xff, 0x80})
	}
	for _, k := range bodyKinds {
		env := protocol.Envelope{Job: protocol.JobID{1}}
		v := reflect.New(reflect.TypeOf(k.zero)).Elem()
		randomFiller(3, true).fill(v)
		env.Body = v.Interface()
		var m proto.Message
		var err error
		if k.toTM {
			m, err = encodeToTaskManager(env)
		} else {
			m, err = encodeFromTaskManager(env)
		}
		if err != nil {
			f.Fatal(err)
		}
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) == 0 {
			return
		}
		k := bodyKinds[int(data[0])%len(bodyKinds)]
		fl := bytesFiller(data[1:])
		v := reflect.New(reflect.TypeOf(k.zero)).Elem()
		fl.fill(v)
		var job protocol.JobID
		fl.fill(reflect.ValueOf(&job).Elem())
		checkTrip(t, protocol.Envelope{Job: job, Body: v.Interface()}, k.toTM)

		to := &pb.ToTaskManager{}
		if proto.Unmarshal(data, to) == nil {
			if env, bye, err := decodeToTaskManager(to); err == nil && bye == nil {
				checkTrip(t, env, true)
			}
		}
		from := &pb.FromTaskManager{}
		if proto.Unmarshal(data, from) == nil {
			if env, bye, err := decodeFromTaskManager(from); err == nil && bye == nil {
				checkTrip(t, env, false)
			}
		}
	})
}
