//go:build go1.21

package redlockc

import (
	"context"
	"log/slog"
)

// WithSlog sends the library's log lines (WithLogger's) to logger, at the
// matching slog level, with the attribute component=redlockc. Go 1.21+.
func WithSlog(logger *slog.Logger) Option {
	return WithLogger(func(level LogLevel, message string) {
		logger.Log(context.Background(), slogLevel(level), message, "component", "redlockc")
	})
}

func slogLevel(l LogLevel) slog.Level {
	switch l {
	case LogError:
		return slog.LevelError
	case LogWarn:
		return slog.LevelWarn
	case LogInfo:
		return slog.LevelInfo
	}
	return slog.LevelDebug
}
