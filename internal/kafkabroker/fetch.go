package kafkabroker

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
)

// Fetch copies the broker's jars from Maven Central into Home() by running
// `mvn dependency:copy-dependencies` on pom.xml (embedded in this package, so that it runs from any
// directory). The jars land in a temporary directory renamed into place at the end, so that an interrupted
// fetch leaves no half-filled home behind. With the jars already there it does nothing and returns their
// directory.
func Fetch(stdout, stderr io.Writer) (string, error) {
	home, err := Home()
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(filepath.Join(home, "kafka_2.13-"+Version+".jar")); err == nil {
		return home, nil
	}
	mvn, err := exec.LookPath("mvn")
	if err != nil {
		return "", fmt.Errorf("kafkabroker: mvn (Apache Maven) is not on PATH; it fetches the Kafka jars")
	}
	if err := os.MkdirAll(filepath.Dir(home), 0o755); err != nil {
		return "", fmt.Errorf("kafkabroker: %w", err)
	}
	tmp, err := os.MkdirTemp(filepath.Dir(home), filepath.Base(home)+".fetch-")
	if err != nil {
		return "", fmt.Errorf("kafkabroker: %w", err)
	}
	defer os.RemoveAll(tmp)
	pomFile := filepath.Join(tmp, "pom.xml")
	if err := os.WriteFile(pomFile, pom, 0o644); err != nil {
		return "", fmt.Errorf("kafkabroker: %w", err)
	}
	jars := filepath.Join(tmp, "jars")
	cmd := exec.Command(mvn, "-q", "-B", "-Dstyle.color=never", "-f", pomFile,
		"dependency:copy-dependencies", "-DincludeScope=runtime", "-DoutputDirectory="+jars)
	cmd.Dir = tmp
	cmd.Stdout, cmd.Stderr = stdout, stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("kafkabroker: mvn dependency:copy-dependencies for Apache Kafka %s: %w", Version, err)
	}
	if _, err := os.Stat(filepath.Join(jars, "kafka_2.13-"+Version+".jar")); err != nil {
		return "", fmt.Errorf("kafkabroker: mvn ran but kafka_2.13-%s.jar is not among the fetched jars: %w", Version, err)
	}
	if err := os.Rename(jars, home); err != nil {
		return "", fmt.Errorf("kafkabroker: moving the jars into %s: %w", home, err)
	}
	return home, nil
}
