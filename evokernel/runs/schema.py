"""The run store's tables (SCHEMA) and the checks that a file is one before it is opened:
its first bytes (``check_file``), its tables and columns and its recorded problem
(``check_store``), and whether its header says WAL mode (``is_wal_file``). Every refusal is a
ConfigError that names the file and says what it is instead."""
from __future__ import annotations

import sqlite3
from pathlib import Path

from evokernel.errors import ConfigError

SCHEMA = """
CREATE TABLE IF NOT EXISTS candidates (
    id TEXT PRIMARY KEY, source TEXT NOT NULL, idea TEXT, parent_ids TEXT, operator TEXT,
    generation INTEGER, created_s REAL);
CREATE TABLE IF NOT EXISTS results (
    candidate_id TEXT PRIMARY KEY, verdict TEXT, reason TEXT, speedup REAL, data TEXT,
    evaluated_s REAL);
CREATE TABLE IF NOT EXISTS generations (
    generation INTEGER PRIMARY KEY, population TEXT, best_id TEXT, best_speedup REAL,
    valid INTEGER, total INTEGER, rng_state TEXT, finished_s REAL);
CREATE TABLE IF NOT EXISTS logbook (generation INTEGER PRIMARY KEY, record TEXT);
CREATE TABLE IF NOT EXISTS llm_calls (
    id INTEGER PRIMARY KEY AUTOINCREMENT, data TEXT, at_s REAL);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE IF NOT EXISTS llm_requests (
    key TEXT PRIMARY KEY, generation INTEGER, purpose TEXT, sample_index INTEGER, model TEXT,
    request TEXT, export TEXT, status TEXT, detail TEXT, batch_id TEXT, attempts INTEGER,
    exported_s REAL, answered_s REAL);
"""


#: The first 16 bytes of every SQLite 3 file (https://www.sqlite.org/fileformat.html, 1.3).
SQLITE_MAGIC = b"SQLite format 3\x00"


def expected_columns() -> dict[str, list[str]]:
    """Each table of SCHEMA with its column names, in order."""
    db = sqlite3.connect(":memory:")
    try:
        db.executescript(SCHEMA)
        tables = [t for (t,) in db.execute("SELECT name FROM sqlite_master WHERE type='table' "
                                           "AND name NOT LIKE 'sqlite_%'")]
        return {t: [c[1] for c in db.execute(f"PRAGMA table_info({t})")] for t in tables}
    finally:
        db.close()


#: The tables every run store has had since the first version; later tables (the batch mode's
#: requests, the Logbook) may be missing from an older store, which then reads them as empty
#: and gains them when opened for writing.
CORE_TABLES = ("candidates", "results", "generations", "llm_calls", "meta")


def check_store(db: sqlite3.Connection, path: Path) -> None:
    """Check that the open connection ``db`` (to ``path``) holds an evokernel run store: every
    core table (CORE_TABLES) with at least the schema's columns, any later table it has with
    them too, and the problem recorded by ``RunStore.create``.

    Raises:
        ConfigError: naming ``path``: a file of another program (its tables are listed), an
            incomplete store (the table or record it lacks), or one SQLite cannot read.
    """
    try:
        found = {t: [c[1] for c in db.execute(f"PRAGMA table_info({t})")] for (t,) in
                 db.execute("SELECT name FROM sqlite_master WHERE type='table'").fetchall()}
        want = expected_columns()
        if not set(want) & set(found):
            raise ConfigError(f"{path}: a SQLite file of another program (tables: "
                              f"{', '.join(sorted(found)) or 'none'}), not an evokernel run "
                              "store")
        for table, columns in want.items():
            if table not in found and table not in CORE_TABLES:
                continue                      # a table of a later version: read as empty
            if table not in found or not set(columns) <= set(found[table]):
                what = "no table" if table not in found else "another layout of table"
                raise ConfigError(f"{path}: not an evokernel run store ({what} {table!r})")
        if db.execute("SELECT 1 FROM meta WHERE key='problem'").fetchone() is None:
            raise ConfigError(f"{path}: an incomplete run store (no problem recorded; the run "
                              "was not created by this version of evokernel, or was cut short)")
    except sqlite3.DatabaseError as e:
        raise ConfigError(f"{path}: not a readable run store ({e})") from e


def check_file(db: Path) -> None:
    """Refuse, before SQLite opens it, a run.sqlite that is empty or not a SQLite file."""
    with db.open("rb") as f:
        head = f.read(len(SQLITE_MAGIC))
    if not head:
        raise ConfigError(f"{db}: an empty file (0 bytes), not a run store: the run never "
                          "started or the file was cut short; start a new run elsewhere")
    if head != SQLITE_MAGIC:
        raise ConfigError(f"{db}: not a readable run store (not a SQLite file: it starts with "
                          f"{head[:8]!r})")


def is_wal_file(db: Path) -> bool:
    """True when the SQLite file's header says WAL mode (bytes 18-19 are 2)."""
    with db.open("rb") as f:
        header = f.read(20)
    return len(header) == 20 and header[18] == 2 and header[19] == 2
