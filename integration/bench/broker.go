package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// kfakeprocPkg is the broker command shared with the crash suite; it runs
// kfake in its own OS process, so the broker's CPU is not in the profile or
// the scheduler of the process under test.
const kfakeprocPkg = "github.com/txoutbox/txoutbox/internal/kfakeproc"

// broker is the kfake process.
type broker struct {
	cmd  *exec.Cmd
	addr string
	done chan error
}

// buildBinary builds a command of this module into dir and returns its path.
func buildBinary(ctx context.Context, pkg, dir string) (string, error) {
	out := filepath.Join(dir, filepath.Base(pkg))
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, pkg)
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("go build %s: %w", pkg, err)
	}
	return out, nil
}

// startBroker builds and starts kfakeproc on a free loopback port and waits
// for its "listening" line.
func startBroker(ctx context.Context, tmp string, partitions int) (*broker, error) {
	bin, err := buildBinary(ctx, kfakeprocPkg, tmp)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "-partitions", fmt.Sprint(partitions))
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start broker: %w", err)
	}
	b := &broker{cmd: cmd, done: make(chan error, 1)}
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			default:
			}
		}
	}()
	go func() { b.done <- cmd.Wait() }()
	select {
	case line := <-lines:
		addr, ok := strings.CutPrefix(line, "kfakeproc: listening on ")
		if !ok {
			b.stop()
			return nil, fmt.Errorf("broker printed %q, want its address", line)
		}
		b.addr = strings.Split(addr, ",")[0]
		return b, nil
	case err := <-b.done:
		return nil, fmt.Errorf("broker exited before listening: %v", err)
	case <-time.After(30 * time.Second):
		b.stop()
		return nil, errors.New("broker did not start listening within 30s")
	}
}

// stop terminates the broker and waits for it.
func (b *broker) stop() {
	_ = b.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-b.done:
	case <-time.After(10 * time.Second):
		_ = b.cmd.Process.Kill()
		<-b.done
	}
}
