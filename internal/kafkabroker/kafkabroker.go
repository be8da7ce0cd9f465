// Package kafkabroker owns the real Apache Kafka broker that Runnel's end-to-end tests run against: one
// combined broker and controller in KRaft mode, on loopback ports picked free, with its log directories in a
// temporary directory, transactions enabled (replication factor 1 for __transaction_state and
// __consumer_offsets). It runs the broker's own jars, fetched from Maven Central by pom.xml beside this file
// (`go run ./internal/kafkabroker/cmd/fetch`), as a child JVM, and kills it with its whole process group when
// the test ends.
//
// kfake stays for fast unit tests; this package is for the tests whose point is Kafka's real behaviour
// (transaction markers, fencing, read_committed). Without Java or the jars the tests skip, naming what to
// run, unless RUNNEL_KAFKA_REQUIRED=1 (as CI sets), when they fail.
package kafkabroker

import (
	"bytes"
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Version is the Apache Kafka release the tests run; pom.xml names the same one. The jar cache directory is
// named after it, so a bump fetches afresh.
const Version = "4.1.1"

// TransactionMaxTimeout is the broker's transaction.max.timeout.ms (Kafka's default, set explicitly so that
// tests can compare the sink's message against it): a producer asking for a longer transaction timeout is
// refused by the broker.
const TransactionMaxTimeout = 15 * time.Minute

// StartTimeout bounds how long Start waits for the broker to answer a metadata request. A broker starts in
// 2 to 3 seconds on an idle 2-core machine; the margin is for a machine busy with `go test -race ./...`.
const StartTimeout = 90 * time.Second

// Environment variables read by this package.
const (
	// EnvHome names the directory holding the broker's jars, instead of ~/.cache/runnel/kafka-VERSION.
	EnvHome = "RUNNEL_KAFKA_HOME"
	// EnvRequired, set to 1, turns a missing Java or missing jars from a skip into a test failure (CI sets it,
	// so that the broker tests cannot silently not run).
	EnvRequired = "RUNNEL_KAFKA_REQUIRED"
	// EnvJVMOpts replaces the JVM options the broker runs with (defaultJVMOpts).
	EnvJVMOpts = "RUNNEL_KAFKA_JVM_OPTS"
)

// defaultJVMOpts keeps the broker small: a test broker holds little data, and on a 2-core machine the
// serial collector leaves the cores to the tests.
const defaultJVMOpts = "-Xms128m -Xmx768m -XX:+UseSerialGC -Djava.awt.headless=true"

//go:embed pom.xml
var pom []byte

// ErrUnavailable is wrapped by StartMain's error when Java or the jars are missing: the caller skips rather
// than fails (unless RUNNEL_KAFKA_REQUIRED=1).
var ErrUnavailable = errors.New("kafka broker unavailable")

// Broker is one running broker. Its fields are read-only.
type Broker struct {
	// Addr is the broker's client listener, "127.0.0.1:PORT": the seed broker for clients.
	Addr string
	// Dir holds server.properties, the log directories and server.log; it is removed when the broker stops.
	Dir string

	pid      int
	stopOnce sync.Once
	stopErr  error
	names    atomic.Int64
}

// Name returns base with a suffix no earlier call on this broker returned ("base-0001"): a topic or
// transactional id prefix of its own for each test, also when a shared broker outlives a test run repeated
// by -count. The suffix has a fixed width, so that no name is the prefix of another.
func (b *Broker) Name(base string) string {
	return fmt.Sprintf("%s-%04d", base, b.names.Add(1))
}

// Home returns the directory the broker's jars are read from: $RUNNEL_KAFKA_HOME, or
// ~/.cache/runnel/kafka-VERSION.
func Home() (string, error) {
	if h := os.Getenv(EnvHome); h != "" {
		return h, nil
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("kafkabroker: no cache directory for the Kafka jars (set %s): %w", EnvHome, err)
	}
	return filepath.Join(cache, "runnel", "kafka-"+Version), nil
}

// FetchHint is what to run to fetch the jars, for skip and error messages.
const FetchHint = "go run ./internal/kafkabroker/cmd/fetch (or mvn -f internal/kafkabroker/pom.xml " +
	"dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory=DIR, then " + EnvHome + "=DIR)"

// available reports where java and the jars are, or an error wrapping ErrUnavailable that says what to do.
func available() (java, home string, err error) {
	java, err = findJava()
	if err != nil {
		return "", "", err
	}
	home, err = Home()
	if err != nil {
		return "", "", fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	if _, err := os.Stat(filepath.Join(home, "kafka_2.13-"+Version+".jar")); err != nil {
		return "", "", fmt.Errorf("%w: the Apache Kafka %s jars are not in %s; run %s", ErrUnavailable, Version, home, FetchHint)
	}
	return java, home, nil
}

func findJava() (string, error) {
	if jh := os.Getenv("JAVA_HOME"); jh != "" {
		p := filepath.Join(jh, "bin", "java")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	p, err := exec.LookPath("java")
	if err != nil {
		return "", fmt.Errorf("%w: java (17 or newer) is not on PATH nor in $JAVA_HOME/bin; the Kafka broker needs it", ErrUnavailable)
	}
	return p, nil
}

// Start starts a broker for the calling test and stops it (process group killed, directory removed) at
// t.Cleanup. Without Java or the jars it skips the test with a message naming what to run, or fails it when
// RUNNEL_KAFKA_REQUIRED=1. When the test fails, the end of the broker's log goes to the test's log.
func Start(t testing.TB) *Broker {
	t.Helper()
	b, err := start()
	if err != nil {
		unavailable(t, err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("kafkabroker: the end of the broker's log (%s):\n%s", b.LogFile(), b.logTail(40))
		}
		if err := b.Stop(); err != nil {
			t.Errorf("kafkabroker: %v", err)
		}
	})
	return b
}

func unavailable(t testing.TB, err error) {
	t.Helper()
	if errors.Is(err, ErrUnavailable) && os.Getenv(EnvRequired) != "1" {
		t.Skipf("kafkabroker: %v (set %s=1 to fail instead of skipping)", err, EnvRequired)
	}
	t.Fatalf("kafkabroker: %v", err)
}

// StartMain starts a broker outside any test, for a package's TestMain to share one broker among its tests
// (a broker costs seconds of both cores to start). stop kills it and removes its directory. The error wraps
// ErrUnavailable when Java or the jars are missing; a TestMain can then run the tests without a broker and let
// each test that needs one call Skip (see Shared for the simpler way).
func StartMain() (b *Broker, stop func() error, err error) {
	b, err = start()
	if err != nil {
		return nil, nil, err
	}
	return b, b.Stop, nil
}

var shared struct {
	sync.Mutex
	b   *Broker
	err error
}

// Shared returns the test binary's shared broker, starting it on first use; it skips or fails as Start does.
// Tests sharing it use their own topic names and transactional id prefixes. It runs until StopShared, which
// the package's TestMain calls after m.Run; without that, the broker still dies with the test binary (it is
// started with a parent-death signal) and its directory is removed by a later start. Keeping no goroutine or
// client of its own, a shared broker does not trip goleak.
func Shared(t testing.TB) *Broker {
	t.Helper()
	shared.Lock()
	defer shared.Unlock()
	if shared.b == nil && shared.err == nil {
		shared.b, shared.err = start()
	}
	if shared.err != nil {
		unavailable(t, shared.err)
	}
	return shared.b
}

// StopShared stops the shared broker if Shared started one.
func StopShared() error {
	shared.Lock()
	defer shared.Unlock()
	if shared.b == nil {
		return nil
	}
	err := shared.b.Stop()
	shared.b = nil
	return err
}

// pidFile, in a broker's directory, names the test process that started it, so that a later start can remove
// the directories of brokers whose test binary died without stopping them.
const pidFile = "owner.pid"

func start() (*Broker, error) {
	java, home, err := available()
	if err != nil {
		return nil, err
	}
	removeStale()
	dir, err := os.MkdirTemp("", "runnel-kafka-")
	if err != nil {
		return nil, fmt.Errorf("kafkabroker: %w", err)
	}
	b, err := launch(java, home, dir)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return b, nil
}

// removeStale removes the directories of brokers whose test process is gone.
func removeStale() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), "runnel-kafka-*"))
	for _, d := range dirs {
		raw, err := os.ReadFile(filepath.Join(d, pidFile))
		if err != nil {
			continue // being created, or not ours
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
		if err != nil || pid <= 0 {
			continue
		}
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			os.RemoveAll(d)
		}
	}
}

func launch(java, home, dir string) (*Broker, error) {
	if err := os.WriteFile(filepath.Join(dir, pidFile), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		return nil, fmt.Errorf("kafkabroker: %w", err)
	}
	ports, err := freePorts(2)
	if err != nil {
		return nil, err
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0]))
	controller := net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[1]))
	props := filepath.Join(dir, "server.properties")
	if err := os.WriteFile(props, []byte(serverProperties(addr, controller, filepath.Join(dir, "data"))), 0o644); err != nil {
		return nil, fmt.Errorf("kafkabroker: %w", err)
	}
	logConf := filepath.Join(dir, "log4j2.properties")
	if err := os.WriteFile(logConf, []byte(log4jProperties(filepath.Join(dir, "server.log"))), 0o644); err != nil {
		return nil, fmt.Errorf("kafkabroker: %w", err)
	}
	jvm := strings.Fields(defaultJVMOpts)
	if o := os.Getenv(EnvJVMOpts); o != "" {
		jvm = strings.Fields(o)
	}
	base := append(jvm, "-cp", filepath.Join(home, "*"), "-Dlog4j2.configurationFile="+logConf, "-Dkafka.logs.dir="+dir)

	// Kafka 4 refuses to start on unformatted log directories: format them as a single-voter (standalone)
	// controller quorum with a fresh cluster id.
	format := exec.Command(java, append(append([]string{}, base...),
		"kafka.tools.StorageTool", "format", "--cluster-id", clusterID(), "--config", props, "--standalone")...)
	format.Dir = dir
	if out, err := format.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("kafkabroker: formatting the broker's storage in %s: %v\n%s", dir, err, out)
	}

	out, err := os.Create(filepath.Join(dir, "stdout.log"))
	if err != nil {
		return nil, fmt.Errorf("kafkabroker: %w", err)
	}
	defer out.Close() // the child has its own copy
	cmd := exec.Command(java, append(base, "kafka.Kafka", props)...)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = out, out // files, so that exec starts no copying goroutine
	// Its own process group, so that Stop kills anything the JVM forks too; SIGKILL when the test process
	// dies, so that a crashed or killed test binary leaves no broker running.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("kafkabroker: starting %s: %w", java, err)
	}
	b := &Broker{Addr: addr, Dir: dir, pid: cmd.Process.Pid}
	if err := b.waitReady(StartTimeout); err != nil {
		b.kill()
		return nil, fmt.Errorf("%w\nthe end of %s:\n%s", err, b.LogFile(), b.logTail(30))
	}
	return b, nil
}

func serverProperties(addr, controller, logDir string) string {
	return strings.Join([]string{
		"process.roles=broker,controller",
		"node.id=1",
		"controller.quorum.bootstrap.servers=" + controller,
		"listeners=PLAINTEXT://" + addr + ",CONTROLLER://" + controller,
		"advertised.listeners=PLAINTEXT://" + addr,
		"controller.listener.names=CONTROLLER",
		"inter.broker.listener.name=PLAINTEXT",
		"listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
		"log.dirs=" + logDir,
		"num.partitions=1",
		// One broker: the internal topics cannot have three replicas. One partition each keeps their
		// creation (on first group or transaction) quick.
		"offsets.topic.replication.factor=1",
		"offsets.topic.num.partitions=1",
		"transaction.state.log.replication.factor=1",
		"transaction.state.log.min.isr=1",
		"transaction.state.log.num.partitions=1",
		"share.coordinator.state.topic.replication.factor=1",
		"share.coordinator.state.topic.min.isr=1",
		"transaction.max.timeout.ms=" + strconv.FormatInt(TransactionMaxTimeout.Milliseconds(), 10),
		// A consumer group's first member gets its partitions at once rather than after 3 s.
		"group.initial.rebalance.delay.ms=0",
		"auto.create.topics.enable=false",
		"",
	}, "\n")
}

func log4jProperties(file string) string {
	return strings.Join([]string{
		"rootLogger.level=INFO",
		"rootLogger.appenderRef.file.ref=file",
		"appender.file.type=File",
		"appender.file.name=file",
		"appender.file.fileName=" + file,
		"appender.file.layout.type=PatternLayout",
		"appender.file.layout.pattern=[%d] %p %m (%c)%n",
		"",
	}, "\n")
}

// clusterID returns a random Kafka cluster id: 16 random bytes in unpadded URL-safe base64, as Kafka's
// Uuid.randomUuid, which also avoids a leading '-' (it would read as a command-line flag).
func clusterID() string {
	for {
		var u [16]byte
		rand.Read(u[:])
		id := base64.RawURLEncoding.EncodeToString(u[:])
		if id[0] != '-' {
			return id
		}
	}
}

// freePorts returns n distinct loopback ports that were free a moment ago. The broker binds them a second or
// two later; another process taking one in between fails the start with a bind error in the log.
func freePorts(n int) ([]int, error) {
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("kafkabroker: finding a free port: %w", err)
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// waitReady waits until the broker answers a metadata request listing itself (it is then registered with the
// controller and unfenced), or the process exits, or the timeout passes.
func (b *Broker) waitReady(timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addr), kgo.RetryTimeout(time.Second))
	if err != nil {
		return fmt.Errorf("kafkabroker: %w", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	var last error
	for {
		if exited, status := b.exited(); exited {
			return fmt.Errorf("kafkabroker: the broker exited while starting (%s)", status)
		}
		reqCtx, reqCancel := context.WithTimeout(ctx, 2*time.Second)
		brokers, err := adm.ListBrokers(reqCtx)
		reqCancel()
		if err == nil && len(brokers) > 0 {
			return nil
		}
		if err == nil {
			err = errors.New("the metadata lists no broker yet")
		}
		last = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("kafkabroker: the broker at %s did not answer within %v: %v", b.Addr, timeout, last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// exited reports, without blocking, whether the broker's process has exited (and reaps it).
func (b *Broker) exited() (bool, string) {
	var ws syscall.WaitStatus
	pid, err := syscall.Wait4(b.pid, &ws, syscall.WNOHANG, nil)
	if err != nil {
		return true, err.Error()
	}
	if pid == 0 {
		return false, ""
	}
	if ws.Signaled() {
		return true, "signal " + ws.Signal().String()
	}
	return true, "exit status " + strconv.Itoa(ws.ExitStatus())
}

// Running reports whether the broker's process is still alive.
func (b *Broker) Running() bool {
	exited, _ := b.exited()
	return !exited
}

// Stop kills the broker's process group, waits for the JVM to be gone and removes the broker's directory.
// There is no graceful shutdown to wait for: nothing outlives the test. Stopping twice is harmless.
func (b *Broker) Stop() error {
	b.stopOnce.Do(func() {
		b.kill()
		if err := os.RemoveAll(b.Dir); err != nil {
			b.stopErr = fmt.Errorf("removing the broker's directory: %w", err)
		}
	})
	return b.stopErr
}

func (b *Broker) kill() {
	// The negative pid names the process group (Setpgid made the JVM its leader).
	syscall.Kill(-b.pid, syscall.SIGKILL)
	var ws syscall.WaitStatus
	for {
		_, err := syscall.Wait4(b.pid, &ws, 0, nil)
		if !errors.Is(err, syscall.EINTR) {
			return // reaped, or ECHILD: already reaped by exited
		}
	}
}

// LogFile is the broker's log (log4j, level INFO).
func (b *Broker) LogFile() string { return filepath.Join(b.Dir, "server.log") }

func (b *Broker) logTail(lines int) string {
	var parts []string
	for _, f := range []string{"stdout.log", "server.log"} {
		raw, err := os.ReadFile(filepath.Join(b.Dir, f))
		if err != nil || len(raw) == 0 {
			continue
		}
		ls := bytes.Split(bytes.TrimRight(raw, "\n"), []byte("\n"))
		if len(ls) > lines {
			ls = ls[len(ls)-lines:]
		}
		parts = append(parts, "== "+f+"\n"+string(bytes.Join(ls, []byte("\n"))))
	}
	return strings.Join(parts, "\n")
}

// Client returns a franz-go client seeded with the broker, with opts added, closed at t.Cleanup.
func (b *Broker) Client(t testing.TB, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(b.Addr)}, opts...)...)
	if err != nil {
		t.Fatalf("kafkabroker: client: %v", err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// Admin returns an admin client of the broker, closed at t.Cleanup.
func (b *Broker) Admin(t testing.TB) *kadm.Client {
	t.Helper()
	return kadm.NewClient(b.Client(t))
}

// CreateTopic creates a topic with the given number of partitions (replication factor 1) and waits until
// every partition has its leader, so that the test can produce to it at once.
func (b *Broker) CreateTopic(t testing.TB, name string, partitions int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	adm := b.Admin(t)
	if _, err := adm.CreateTopic(ctx, int32(partitions), 1, nil, name); err != nil {
		t.Fatalf("kafkabroker: creating topic %q with %d partitions: %v", name, partitions, err)
	}
	for {
		md, err := adm.Metadata(ctx, name)
		if err == nil {
			if td, ok := md.Topics[name]; ok && td.Err == nil && len(td.Partitions) == partitions && allLed(td) {
				return
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("kafkabroker: topic %q has no leader for each of its %d partitions after 30s (last error: %v)", name, partitions, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func allLed(td kadm.TopicDetail) bool {
	for _, p := range td.Partitions {
		if p.Err != nil || p.Leader < 0 {
			return false
		}
	}
	return true
}

// OngoingTransactions lists the transactions whose transactional id starts with prefix ("" for all) and
// that are in state Ongoing: begun and neither committed nor aborted, so that they hold back every
// read_committed reader of their partitions (the last stable offset stops at their first record). The
// transitional states PrepareCommit and PrepareAbort are left out: the coordinator is already writing
// their markers. Sorted by transactional id.
func (b *Broker) OngoingTransactions(t testing.TB, prefix string) []kadm.ListedTransaction {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	listed, err := b.Admin(t).ListTransactions(ctx, nil, []string{"Ongoing"})
	if err != nil {
		t.Fatalf("kafkabroker: listing transactions: %v", err)
	}
	var out []kadm.ListedTransaction
	for _, tx := range listed.Sorted() {
		if strings.HasPrefix(tx.TxnID, prefix) && tx.State == "Ongoing" {
			out = append(out, tx)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].TxnID < out[j].TxnID })
	return out
}

// ReadTopic reads every record of topic from the start up to where the topic ended when the call began: the
// high watermark with kgo.ReadUncommitted(), the last stable offset with kgo.ReadCommitted() (records of
// aborted transactions skipped). Records come in offset order within each partition. It fails the test when
// the records do not come within 60 s.
func (b *Broker) ReadTopic(t testing.TB, topic string, level kgo.IsolationLevel) []*kgo.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	adm := b.Admin(t)
	list := adm.ListEndOffsets
	if level == kgo.ReadCommitted() {
		list = adm.ListCommittedOffsets // the last stable offsets
		b.awaitMarkers(ctx, t, topic)
	}
	listed, err := list(ctx, topic)
	if err == nil {
		err = listed.Error()
	}
	if err != nil {
		t.Fatalf("kafkabroker: listing the end offsets of %s: %v", topic, err)
	}
	ends := map[int32]int64{}
	listed.Each(func(o kadm.ListedOffset) { ends[o.Partition] = o.Offset })
	// Control records (transaction markers) are kept: they take offsets too, and one may be the last below
	// the end, so the offsets of records and markers together say when a partition is read.
	cl := b.Client(t, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(level), kgo.KeepControlRecords())
	next := map[int32]int64{}
	done := func() bool {
		for p, end := range ends {
			if next[p] < end {
				return false
			}
		}
		return true
	}
	var recs []*kgo.Record
	for !done() {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("kafkabroker: reading %s up to offsets %v: timed out at %v", topic, ends, next)
		}
		fs.EachError(func(topic string, p int32, err error) { t.Fatalf("kafkabroker: reading %s/%d: %v", topic, p, err) })
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset >= ends[r.Partition] {
				return // written after the call began
			}
			next[r.Partition] = r.Offset + 1
			if !r.Attrs.IsControl() {
				recs = append(recs, r)
			}
		})
	}
	return recs
}

// awaitMarkers waits until no transaction that touches topic is between its end and its markers. A commit or
// abort returns once the coordinator has logged its decision (PrepareCommit, PrepareAbort); the markers
// reach the partitions a moment later, and until then the last stable offset stays before the
// transaction's records. A read_committed read that begins in that moment would miss records whose commit
// has already returned.
func (b *Broker) awaitMarkers(ctx context.Context, t testing.TB, topic string) {
	t.Helper()
	adm := b.Admin(t)
	for {
		listed, err := adm.ListTransactions(ctx, nil, []string{"PrepareCommit", "PrepareAbort"})
		if err != nil {
			t.Fatalf("kafkabroker: listing the transactions that are ending: %v", err)
		}
		ids := listed.TransactionalIDs()
		if len(ids) == 0 {
			return
		}
		described, err := adm.DescribeTransactions(ctx, ids...)
		if err != nil {
			t.Fatalf("kafkabroker: describing the transactions that are ending: %v", err)
		}
		pending := false
		for _, d := range described {
			if (d.State == "PrepareCommit" || d.State == "PrepareAbort") && len(d.Topics[topic]) > 0 {
				pending = true
			}
		}
		if !pending {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("kafkabroker: transactions on %s still ending: %v", topic, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}
