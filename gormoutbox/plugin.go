package gormoutbox

import (
	"fmt"

	"gorm.io/gorm"

	"github.com/txoutbox/txoutbox"
)

// Name is the plugin's name in gorm.Config.Plugins.
const Name = "gormoutbox"

// Plugin writes the events models record, and the change events of models
// that opt in, into the outbox table in the model's own transaction. Build
// it with New and register it with db.Use. One Plugin may be registered on
// several *gorm.DB.
type Plugin struct {
	writers      map[string]writerOrErr // by GORM's dialect name: "postgres", "mysql"
	defaultTopic string
	policy       TxPolicy
}

var _ gorm.Plugin = (*Plugin)(nil)

// New validates cfg and returns the plugin.
func New(cfg Config) (*Plugin, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	p := &Plugin{writers: map[string]writerOrErr{}, defaultTopic: cfg.DefaultTopic, policy: cfg.TxPolicy}
	// One Plugin may be registered on several *gorm.DB, of either
	// database: a writer per dialect, unless Writer.Dialect names one.
	for name, d := range map[string]txoutbox.Dialect{"postgres": txoutbox.PostgreSQL, "mysql": txoutbox.MySQL} {
		if cfg.Writer.Dialect != 0 && cfg.Writer.Dialect != d {
			p.writers[name] = writerOrErr{err: fmt.Errorf("gormoutbox: Config.Writer.Dialect is %s, and this *gorm.DB is %s", cfg.Writer.Dialect, d)}
			continue
		}
		wc := cfg.Writer
		wc.Dialect = d
		w, err := txoutbox.NewWriter(wc)
		if err != nil && (d == cfg.Writer.Dialect || d == txoutbox.PostgreSQL && cfg.Writer.Dialect == 0) {
			return nil, fmt.Errorf("gormoutbox: %w", err)
		}
		if err != nil {
			err = fmt.Errorf("gormoutbox: on MySQL: %w", err)
		}
		p.writers[name] = writerOrErr{w, err}
	}
	return p, nil
}

// writerOrErr is the Writer of one dialect, or why the configuration has
// none (WALMessages on MySQL, say), reported when a *gorm.DB of that
// dialect registers the plugin.
type writerOrErr struct {
	w   *txoutbox.Writer
	err error
}

// writer is the Writer for db's dialect.
func (p *Plugin) writer(db *gorm.DB) (*txoutbox.Writer, error) {
	name := db.Dialector.Name()
	we, ok := p.writers[name]
	if !ok {
		return nil, fmt.Errorf("gormoutbox: dialect %q is not supported: the outbox lives in PostgreSQL, MySQL or MariaDB", name)
	}
	return we.w, we.err
}

// Name implements gorm.Plugin.
func (p *Plugin) Name() string { return Name }

// Initialize implements gorm.Plugin; db.Use calls it. It registers the
// plugin's callbacks and returns GORM's error if they conflict with the
// ordering another plugin asked for. GORM leaves a *gorm.DB whose callbacks
// failed to compile unusable, so treat that error as fatal.
func (p *Plugin) Initialize(db *gorm.DB) error {
	if _, err := p.writer(db); err != nil {
		return err
	}
	cb := db.Callback()
	type reg struct {
		register func(string, func(*gorm.DB)) error
		name     string
		fn       func(*gorm.DB)
	}
	regs := []reg{
		{cb.Create().After("gorm:begin_transaction").Before("gorm:before_create").Register, "gormoutbox:ensure_tx_create", p.ensure(opCreate)},
		{cb.Create().After("gorm:after_create").Before("gorm:commit_or_rollback_transaction").Register, "gormoutbox:write_create", p.write(opCreate)},
		{cb.Update().After("gorm:setup_reflect_value").Before("gorm:before_update").Register, "gormoutbox:ensure_tx_update", p.ensure(opUpdate)},
		{cb.Update().After("gorm:after_update").Before("gorm:commit_or_rollback_transaction").Register, "gormoutbox:write_update", p.write(opUpdate)},
		{cb.Delete().After("gorm:begin_transaction").Before("gorm:before_delete").Register, "gormoutbox:ensure_tx_delete", p.ensure(opDelete)},
		{cb.Delete().After("gorm:after_delete").Before("gorm:commit_or_rollback_transaction").Register, "gormoutbox:write_delete", p.write(opDelete)},
	}
	for _, r := range regs {
		if err := r.register(r.name, r.fn); err != nil {
			return fmt.Errorf("gormoutbox: register callback %s: %w", r.name, err)
		}
	}
	return nil
}
