package main

import (
	"context"
	"io"
	"log/slog"

	"github.com/sirupsen/logrus"
)

// routeLibraryLogs sends what libraries log to l, so that every line on
// stderr is one of l's (JSON in JSON mode, with its priority under the
// journal): Go's log package (net/http's servers) and slog's default, and
// logrus, which podman's bindings log through.
func routeLibraryLogs(l *slog.Logger) {
	slog.SetDefault(l)
	logrus.SetOutput(io.Discard)
	logrus.StandardLogger().ReplaceHooks(logrus.LevelHooks{})
	logrus.AddHook(logrusHook{l.With("component", "podman-bindings")})
}

// logrusHook writes logrus' entries to a slog logger.
type logrusHook struct{ l *slog.Logger }

func (logrusHook) Levels() []logrus.Level { return logrus.AllLevels }

func (h logrusHook) Fire(e *logrus.Entry) error {
	level := slog.LevelDebug
	switch {
	case e.Level <= logrus.ErrorLevel: // panic, fatal, error
		level = slog.LevelError
	case e.Level == logrus.WarnLevel:
		level = slog.LevelWarn
	case e.Level == logrus.InfoLevel:
		level = slog.LevelInfo
	}
	args := make([]any, 0, 2*len(e.Data))
	for k, v := range e.Data {
		args = append(args, k, v)
	}
	h.l.Log(context.Background(), level, e.Message, args...)
	return nil
}
