"""The PostgreSQL store: what only a server shows (several machines, a restart, secrets).

The shared behaviour runs on both backends through ``store`` (conftest.py); here are the
PostgreSQL-only promises. Each "machine" is its own ``Store`` (its own pool and process
state) on one database.
"""

from __future__ import annotations

import logging
import threading

import pytest

from offload.config import Settings, StoreSettings, load_settings
from offload.core.tokens import EstimateCounter
from offload.errors import ConfigError, FenceError, StoreError
from offload.store.backend import Sql
from offload.store.store import Store
from pgserver import PgServer


def _open(url: str, **kwargs: float) -> Store:
    return Store(url, StoreSettings(**kwargs), counter=EstimateCounter())  # type: ignore[arg-type]


def test_the_schema_records_its_migrations_on_the_server(pg_database: str) -> None:
    with _open(pg_database) as store:
        names = [r[0] for r in store.conn.execute(Sql("SELECT name FROM _migrations"))]
        assert names[0] == "pg001_initial"
        assert store.backend == "postgresql"
    with _open(pg_database) as again:  # a second open applies nothing twice
        assert [r[0] for r in again.conn.execute(Sql("SELECT name FROM _migrations"))] == names


def test_an_entry_stored_on_one_machine_is_found_and_read_on_another(pg_database: str) -> None:
    with _open(pg_database) as a, _open(pg_database) as b:
        e = a.put("the deploy key rotates every Tuesday", scope="team", label="rota").entry
        hits = b.search("when does the deploy key rotate", scope="team")
        assert [h.entry.id for h in hits] == [e.id]
        assert b.read("rota") == "the deploy key rotates every Tuesday"
        b.forget("rota")
        with pytest.raises(Exception, match="gone"):
            a.read("rota")


def test_run_numbers_from_two_machines_never_collide(pg_database: str) -> None:
    with _open(pg_database) as a, _open(pg_database) as b:
        got: list[int] = []
        lock = threading.Lock()

        def draw(store: Store) -> None:
            for _ in range(40):
                n = store.next_number("gateway.run")
                with lock:
                    got.append(n)

        threads = [threading.Thread(target=draw, args=(s,)) for s in (a, b, a, b)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        assert sorted(got) == list(range(1, 161))


def test_a_checkout_on_one_machine_checks_in_on_another_with_its_nonce(pg_database: str) -> None:
    with _open(pg_database) as a, _open(pg_database) as b:
        ref = a.put("a body to edit").entry.ref
        co = a.checkout(ref)
        with pytest.raises(FenceError):
            b.checkin(ref, "not-the-nonce")
        assert b.checkin(ref, co.nonce).status == "cold"


def test_the_same_content_put_from_two_machines_at_once_is_one_entry(pg_database: str) -> None:
    with _open(pg_database) as a, _open(pg_database) as b:
        results: list[int] = []

        def put(store: Store) -> None:
            for i in range(20):
                results.append(store.put(f"shared body {i}", scope="s").entry.id)

        threads = [threading.Thread(target=put, args=(s,)) for s in (a, b)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        assert len(results) == 40 and len(set(results)) == 20
        assert a.count() == 20


def test_a_server_crash_loses_no_acknowledged_write_and_the_store_recovers(
    pg_server: PgServer, pg_database: str
) -> None:
    with _open(pg_database, busy_timeout_s=3.0) as store:
        before = store.put("acknowledged before the crash", label="before").entry
        pg_server.stop("immediate")  # a crash: recovery replays the log on the next start
        try:
            with pytest.raises(StoreError) as down:
                store.put("written while the server is down")
            assert down.value.exit_code == 5 and "unavailable" in str(down.value)
        finally:
            pg_server.start()
        assert store.read("before") == "acknowledged before the crash"
        assert store.resolve(before.ref).id == before.id
        after = store.put("written after the restart").entry
        assert store.read(after.ref) == "written after the restart"


def test_a_password_never_reaches_an_error_or_the_log(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    url = "postgresql://alice:s3cr3t-pw@127.0.0.1:1/team?sslmode=disable&password=other-s3cr3t"
    with pytest.raises(StoreError) as err:
        _open(url, busy_timeout_s=0.5)
    message = str(err.value)
    assert "alice:***@127.0.0.1:1/team" in message and "sslmode=disable" in message
    for secret in ("s3cr3t-pw", "other-s3cr3t"):
        assert secret not in message and secret not in caplog.text
    assert err.value.__cause__ is None and err.value.__suppress_context__


def test_store_url_chooses_the_backend_and_is_validated(tmp_path: object) -> None:
    assert Settings().store.url == ""
    s = load_settings(env={}, flags={"store.url": "sqlite:///srv/offload/team.db"})
    assert str(s.db_path) == "/srv/offload/team.db"
    with pytest.raises(ConfigError, match="sqlite:/// or postgresql://"):
        StoreSettings(url="mysql://root:pw@db/x")
    with pytest.raises(ConfigError) as bad:
        StoreSettings(url="ftp://u:hunter2@h/x")
    assert "hunter2" not in str(bad.value)
    with pytest.raises(ConfigError, match="absolute"):
        StoreSettings(url="sqlite://relative.db")


def test_settings_with_a_postgres_url_open_a_team_store(pg_database: str) -> None:
    settings = load_settings(env={}, flags={"store.url": pg_database})
    with Store.open(settings, counter=EstimateCounter()) as store:
        assert store.backend == "postgresql"
        assert store.location == pg_database
        store.put("opened through settings")
        assert store.stats()["path"] == pg_database


def test_a_store_opened_by_the_withdrawn_postings_migration_loses_its_triggers_and_tables(
    pg_database: str,
) -> None:
    with _open(pg_database) as store:
        store.put("before the postings", scope="team")
        conn = store.conn
        # what pg_impact_postings left in a store it ran on (the same names)
        conn.execute(Sql("CREATE TABLE impacts (chunk bigint, term text, impact real)"))
        conn.execute(Sql("CREATE TABLE impact_reference (length real, chunks bigint)"))
        conn.execute(
            Sql(
                "CREATE FUNCTION offload_impacts_add() RETURNS trigger LANGUAGE plpgsql AS "
                "$$ BEGIN INSERT INTO impacts VALUES (0, 'x', 1); RETURN NULL; END $$"
            )
        )
        conn.execute(
            Sql(
                "CREATE TRIGGER search_body_impacts_add AFTER INSERT ON search_body "
                "FOR EACH STATEMENT EXECUTE FUNCTION offload_impacts_add()"
            )
        )
        conn.execute(Sql("DELETE FROM _migrations WHERE name = 'pg_drop_impact_postings'"))
        conn.commit()
    with _open(pg_database) as again:
        conn = again.conn
        left = conn.execute(
            Sql("SELECT to_regclass('impacts'), to_regclass('impact_reference')")
        ).fetchone()
        assert tuple(left) == (None, None)
        triggers = conn.execute(
            Sql("SELECT count(*) FROM pg_trigger WHERE tgname LIKE 'search_body_impacts%'")
        ).fetchone()
        assert triggers[0] == 0
        e = again.put("after the postings are gone", scope="team").entry  # no trigger fails
        assert [h.entry.id for h in again.search("gone", scope="team")] == [e.id]
