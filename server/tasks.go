package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"

	"downloader"
	"downloader/internal/httpjson"
)

// maxSubmitCount bounds one POST /v1/tasks (the body is bounded too, at 1 MiB).
const maxSubmitCount = 10_000

// TaskQueue is the embedded local queue that POST /v1/tasks feeds (store/embedded's
// Queue, adapted in cmd/downloader). Implementations are safe for concurrent use.
type TaskQueue interface {
	// CheckTask validates one task as the queue would store it; errors are EINVALID
	// naming the task's field.
	CheckTask(t downloader.Task) error
	// SubmitTasks queues tasks that passed CheckTask, deduplicating by URL.
	SubmitTasks(ctx context.Context, tasks []downloader.Task) ([]TaskSubmission, error)
	// TaskStatus returns one task, or an ENOTFOUND error.
	TaskStatus(ctx context.Context, taskID string) (*downloader.TaskStatus, error)
	// ListTasks lists tasks in task id order, those in state only when state is not
	// empty, a page at a time from an opaque cursor ("" first; "" returned after the last
	// page). An invalid state is an EINVALID error naming the field state.
	ListTasks(ctx context.Context, state downloader.TaskState, cursor string, limit int) ([]downloader.TaskStatus, string, error)
}

// TaskSubmission is what the queue did with one submitted task.
type TaskSubmission struct {
	TaskID      string `json:"task_id"`
	URL         string `json:"url"`
	IsDuplicate bool   `json:"is_duplicate"` // queued before (any state): nothing was added
	State       string `json:"state"`        // as stored: pending, leased, done or skipped
}

// submittedTask is one task of POST /v1/tasks: the task fields a caller may give. The
// lease is the queue's to set, so lease_expires_at is an unknown field here.
type submittedTask struct {
	TaskID        string `json:"task_id"`
	URL           string `json:"url"`
	Domain        string `json:"domain"`
	MinIntervalMs *int64 `json:"min_interval_ms"`
	ShouldRender  bool   `json:"should_render"`
	ShouldStore   *bool  `json:"should_store"`
	// RequestHeaders are allow-listed headers to send (downloader.HeaderPolicy, checked by
	// the queue's CheckTask).
	RequestHeaders downloader.RequestHeaders `json:"request_headers"`
}

// Task returns the task to queue; should_store defaults to true (a crawl keeps its pages).
func (t submittedTask) Task() downloader.Task {
	return downloader.Task{TaskID: t.TaskID, URL: t.URL, Domain: t.Domain, MinIntervalMs: t.MinIntervalMs,
		ShouldRender: t.ShouldRender, ShouldStore: t.ShouldStore == nil || *t.ShouldStore,
		RequestHeaders: t.RequestHeaders}
}

type submitResponse struct {
	Tasks          []TaskSubmission `json:"tasks"`
	QueuedCount    int              `json:"queued_count"`
	DuplicateCount int              `json:"duplicate_count"`
}

// handleSubmitTasks is POST /v1/tasks {"tasks": [...]}: queue tasks in the local queue.
// Every task is checked before any is queued; a bad one is a 400 naming it, as in
// tasks[3].url.
func (s *Server) handleSubmitTasks() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.cfg.Tasks == nil {
			s.writeError(w, r, downloader.Errorf(downloader.ENOTFOUND, "this downloader has no local queue: its tasks come from the scheduler"))
			return
		}
		var body struct {
			Tasks []json.RawMessage `json:"tasks"`
		}
		if err := decode(w, r, &body); err != nil {
			s.writeError(w, r, err)
			return
		}
		switch {
		case body.Tasks == nil:
			s.writeError(w, r, downloader.Invalidf("tasks", "tasks is required: a list of task objects"))
			return
		case len(body.Tasks) > maxSubmitCount:
			s.writeError(w, r, downloader.Invalidf("tasks", "at most %d tasks at once", maxSubmitCount))
			return
		}
		tasks := make([]downloader.Task, len(body.Tasks))
		for i, raw := range body.Tasks {
			var st submittedTask
			if err := decodeBytes(raw, &st); err != nil {
				s.writeError(w, r, itemError(i, err))
				return
			}
			tasks[i] = st.Task()
			if err := s.cfg.Tasks.CheckTask(tasks[i]); err != nil {
				s.writeError(w, r, itemError(i, err))
				return
			}
		}
		res, err := s.cfg.Tasks.SubmitTasks(r.Context(), tasks)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		out := submitResponse{Tasks: res}
		for _, t := range res {
			if t.IsDuplicate {
				out.DuplicateCount++
			} else {
				out.QueuedCount++
			}
		}
		status := http.StatusOK
		if out.QueuedCount > 0 {
			status = http.StatusCreated
		}
		writeJSON(w, status, out)
	})
}

// maxTaskListLimit bounds one GET /v1/tasks page.
const maxTaskListLimit = 1000

type taskListResponse struct {
	Tasks      []downloader.TaskStatus `json:"tasks"`
	NextCursor *string                 `json:"next_cursor"` // null after the last page (cursorOf)
}

// handleTaskStatus is GET /v1/tasks/{task_id}: one local-queue task's state (queued,
// leased, done, failed, skipped), attempt_count and last outcome.
func (s *Server) handleTaskStatus() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.cfg.Tasks == nil {
			s.writeError(w, r, downloader.Errorf(downloader.ENOTFOUND, "this downloader has no local queue: its tasks come from the scheduler"))
			return
		}
		st, err := s.cfg.Tasks.TaskStatus(r.Context(), r.PathValue("task_id"))
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		writeJSON(w, http.StatusOK, st)
	})
}

// handleListTasks is GET /v1/tasks?state=&limit=&cursor=: the local queue's tasks in task
// id order, a page at a time.
func (s *Server) handleListTasks() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.cfg.Tasks == nil {
			s.writeError(w, r, downloader.Errorf(downloader.ENOTFOUND, "this downloader has no local queue: its tasks come from the scheduler"))
			return
		}
		q := r.URL.Query()
		state := downloader.TaskState(q.Get("state"))
		if state != "" && !state.IsValid() {
			s.writeError(w, r, downloader.Invalidf("state", "state must be one of queued, leased, done, failed, skipped"))
			return
		}
		limit := 0
		if v := q.Get("limit"); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > maxTaskListLimit {
				s.writeError(w, r, downloader.Invalidf("limit", "limit must be a whole number from 1 to %d", maxTaskListLimit))
				return
			}
			limit = n
		}
		tasks, next, err := s.cfg.Tasks.ListTasks(r.Context(), state, q.Get("cursor"), limit)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		if tasks == nil {
			tasks = []downloader.TaskStatus{}
		}
		writeJSON(w, http.StatusOK, taskListResponse{Tasks: tasks, NextCursor: cursorOf(next)})
	})
}

// decodeBytes decodes one JSON object strictly, like decode.
func decodeBytes(b []byte, v any) error { return httpjson.Unmarshal(b, v) }

// itemError renames an EINVALID error about a task's field to name the task too.
func itemError(i int, err error) error {
	if downloader.ErrorCode(err) != downloader.EINVALID {
		return err
	}
	field := fmt.Sprintf("tasks[%d]", i)
	if f := downloader.ErrorField(err); f != "" && f != "body" {
		field += "." + f
	}
	return downloader.Invalidf(field, "%s: %s", field, downloader.ErrorMessage(err))
}
