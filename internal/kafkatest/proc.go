package kafkatest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// ProcPackage is the broker command (internal/kfakeproc): kfake in an OS
// process of its own, which can be stopped, crashed and restarted, and
// whose CPU is not in the profile or the scheduler of the process under
// test.
const ProcPackage = "github.com/txoutbox/txoutbox/internal/kfakeproc"

// Build compiles the command pkg into dir with `go build` (no -race: the
// children are the system around the test, not its subject) and returns
// the binary's path.
func Build(ctx context.Context, pkg, dir string) (string, error) {
	out := filepath.Join(dir, filepath.Base(pkg))
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, pkg)
	if msg, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %w\n%s", pkg, err, msg)
	}
	return out, nil
}

// Proc is a running kfakeproc process.
type Proc struct {
	// Addr is the first address the broker listens on.
	Addr string
	// Control is the address of its fault-control endpoint ("" unless
	// started with -control-addr).
	Control string

	cmd  *exec.Cmd
	done chan struct{}
}

// StartProc starts the kfakeproc binary bin with args (its flags), its
// stderr to stderr, and waits until it prints that it listens. A process
// that exits first, or does not listen within 30 seconds, is an error.
func StartProc(ctx context.Context, bin string, args []string, stderr io.Writer) (*Proc, error) {
	cmd := exec.Command(bin, args...)
	DieWithParent(cmd)
	cmd.Stderr = stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start broker: %w", err)
	}
	p := &Proc{cmd: cmd, done: make(chan struct{})}
	type ready struct{ addr, control string }
	readyc := make(chan ready, 1)
	go func() {
		var r ready
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if addr, ok := strings.CutPrefix(sc.Text(), "kfakeproc: control on "); ok {
				r.control = addr
			}
			if addrs, ok := strings.CutPrefix(sc.Text(), "kfakeproc: listening on "); ok {
				r.addr = strings.Split(addrs, ",")[0]
				readyc <- r
				break
			}
		}
		for sc.Scan() { // keep draining so the child never blocks on stdout
		}
	}()
	go func() {
		_ = cmd.Wait()
		close(p.done)
	}()
	t := time.NewTimer(30 * time.Second)
	defer t.Stop()
	select {
	case r := <-readyc:
		p.Addr, p.Control = r.addr, r.control
		return p, nil
	case <-p.done:
		err = errors.New("broker exited before listening")
	case <-t.C:
		err = errors.New("broker not listening after 30s")
	case <-ctx.Done():
		err = ctx.Err()
	}
	_ = cmd.Process.Kill()
	<-p.done
	return nil, err
}

// Pid is the process id.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Stop stops the broker with SIGTERM, so it flushes its data directory,
// and waits for it to exit; after timeout it kills it and says so.
func (p *Proc) Stop(timeout time.Duration) error {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-p.done:
		return nil
	case <-t.C:
		_ = p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("broker: did not stop within %s of SIGTERM; killed", timeout)
	}
}
