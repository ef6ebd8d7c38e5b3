package chromium

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Browser user data directories.
//
// chromedp's ExecAllocator makes a chromedp-runner* directory in TMPDIR for each launch
// and removes it only when the browser is closed cleanly: after a kill -9 of the
// downloader it stays for ever. Instead, each launch gets its own directory under a parent
// the pool owns, locked with flock(2) for as long as the browser lives: the kernel drops
// the lock when the process dies, however it dies. Before each launch the pool removes
// every directory whose lock it can take (its owner is dead), and never one whose lock is
// held (another pool, in this process or another, still uses it).
//
//	{parent}/                 0700, owned by us; default $TMPDIR/downloader-renderer-{uid}
//	{parent}/{pid}-{random}/  one launch: pid names the launching process (for people)
//	    lock                  flock'd while the browser lives
//	    profile/              the browser's --user-data-dir
//
// A directory is made under a hidden name (.new-*), locked, and only then renamed to its
// final name, so that a sweep never sees a live directory before its lock is held. A
// hidden one is swept only once it is older than newDirGrace: between its lock file's
// creation and its flock the lock can be taken by anyone, and a sweep removing it then
// would follow it through the rename (os.RemoveAll works from an open directory) and empty
// a live directory. Making one takes microseconds; a minute-old one was abandoned.

const (
	profileLockName   = "lock"
	profileDataName   = "profile"
	profileNewPrefix  = ".new-"
	profileParentMode = 0o700
	newDirGrace       = time.Minute
)

// ProfileDir is one launch's user data directory. Release it once the browser has exited.
type ProfileDir struct {
	parent string
	dir    string   // {parent}/{pid}-{random}
	path   string   // the browser's --user-data-dir: {dir}/profile
	lock   *os.File // holds the flock
	swept  int      // stale directories removed before this one was made
}

// defaultProfileParent is $TMPDIR/downloader-renderer-{uid}: one per user, so that
// another user's directory is never ours to sweep.
func defaultProfileParent() string {
	return filepath.Join(os.TempDir(), "downloader-renderer-"+strconv.Itoa(os.Getuid()))
}

// NewProfileDir sweeps parent ("" for the default) of dead launches' directories and
// makes a locked directory for one launch. Now is the time of the call (the age of
// abandoned hidden directories is judged by it).
func NewProfileDir(parent string, now time.Time) (*ProfileDir, error) {
	if parent == "" {
		parent = defaultProfileParent()
	}
	// A pool releasing the last directory removes the parent: try again when it vanished
	// between our MkdirAll and MkdirTemp.
	var err error
	for range 5 {
		var d *ProfileDir
		d, err = makeProfileDir(parent, now)
		if err == nil {
			return d, nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			break
		}
	}
	return nil, fmt.Errorf("browser profile directory under %s: %w", parent, err)
}

func makeProfileDir(parent string, now time.Time) (*ProfileDir, error) {
	if err := ownParent(parent); err != nil {
		return nil, err
	}
	swept, err := sweepProfileDirs(parent, now)
	if err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp(parent, profileNewPrefix)
	if err != nil {
		return nil, err
	}
	lock, err := lockDir(tmp)
	if err != nil {
		os.RemoveAll(tmp)
		return nil, err
	}
	dir := filepath.Join(parent, strconv.Itoa(os.Getpid())+"-"+strings.TrimPrefix(filepath.Base(tmp), profileNewPrefix))
	if err := os.Rename(tmp, dir); err != nil {
		lock.Close()
		os.RemoveAll(tmp)
		return nil, err
	}
	path := filepath.Join(dir, profileDataName)
	if err := os.Mkdir(path, 0o700); err != nil {
		os.RemoveAll(dir)
		lock.Close()
		return nil, err
	}
	return &ProfileDir{parent: parent, dir: dir, path: path, lock: lock, swept: swept}, nil
}

// lockDir creates dir's lock file and takes its lock. The file is opened close-on-exec,
// so the browser does not inherit the lock and outlive us holding it.
func lockDir(dir string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, profileLockName), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", f.Name(), err)
	}
	return f, nil
}

// ownParent makes parent if needed and checks that it is a directory of ours that no one
// else can write: in a shared TMPDIR another user could have made it first.
func ownParent(parent string) error {
	if err := os.MkdirAll(parent, profileParentMode); err != nil {
		return err
	}
	fi, err := os.Lstat(parent)
	if err != nil {
		return err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	switch {
	case !fi.IsDir():
		return fmt.Errorf("%s is not a directory", parent)
	case ok && int(st.Uid) != os.Getuid():
		return fmt.Errorf("%s belongs to uid %d, not us", parent, st.Uid)
	case fi.Mode().Perm()&0o077 != 0:
		return fmt.Errorf("%s is open to others (mode %v)", parent, fi.Mode().Perm())
	}
	return nil
}

// sweepProfileDirs removes the directories under parent whose owner is dead (their lock
// can be taken; hidden ones also older than newDirGrace at now) and returns how many.
// Live ones, and names it does not know, are left.
func sweepProfileDirs(parent string, now time.Time) (int, error) {
	entries, err := os.ReadDir(parent)
	if err != nil {
		return 0, err
	}
	removed := 0
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		dir := filepath.Join(parent, e.Name())
		if strings.HasPrefix(e.Name(), profileNewPrefix) {
			// Being made, or left by a process that died between mkdir and rename.
			fi, err := e.Info()
			if err != nil || now.Sub(fi.ModTime()) < newDirGrace {
				continue
			}
			if isDead(dir, true) {
				if os.RemoveAll(dir) == nil {
					removed++
				}
			}
			continue
		}
		if _, _, ok := strings.Cut(e.Name(), "-"); !ok {
			continue
		}
		if isDead(dir, true) && os.RemoveAll(dir) == nil {
			removed++
		}
	}
	return removed, nil
}

// isDead reports whether dir's owner is gone: its lock file exists and its lock can be
// taken. The lock is taken only to look, and let go at once (the directory is removed
// right after by the caller; a second sweeper that takes it then removes nothing more).
// A missing lock file is a dead owner when missingIsDead (a final name is renamed only
// once locked) and a live one otherwise.
func isDead(dir string, missingIsDead bool) bool {
	f, err := os.OpenFile(filepath.Join(dir, profileLockName), os.O_RDWR, 0)
	if err != nil {
		return missingIsDead && errors.Is(err, fs.ErrNotExist)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		return false // EWOULDBLOCK: a live owner
	}
	return true
}

// Path is the browser's --user-data-dir.
func (d *ProfileDir) Path() string { return d.path }

// Swept is how many stale directories were removed before this one was made.
func (d *ProfileDir) Swept() int { return d.swept }

// Release removes the directory, then lets go of its lock, and removes the parent if it
// is now empty. Call it after the browser has exited. Safe to call more than once.
func (d *ProfileDir) Release() error {
	if d == nil || d.lock == nil {
		return nil
	}
	err := os.RemoveAll(d.dir)
	d.lock.Close()
	d.lock = nil
	os.Remove(d.parent) // fails, harmlessly, while another launch's directory is there
	if err != nil {
		return fmt.Errorf("remove browser profile %s: %w", d.dir, err)
	}
	return nil
}
