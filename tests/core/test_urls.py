"""Connection URLs are shown without their secrets."""

from __future__ import annotations

import pytest

from offload.config import Settings, explain, is_secret
from offload.core.urls import redact_setting, redact_url


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        (
            "postgresql://offload:s3cret@db.internal:5432/team",
            "postgresql://offload:***@db.internal:5432/team",
        ),
        ("postgresql://offload@db/team", "postgresql://offload@db/team"),
        (
            "postgresql://db/team?sslmode=verify-full&password=s3cret",
            "postgresql://db/team?sslmode=verify-full&password=***",
        ),
        (
            "postgresql://u:p%40ss@db/x?sslpassword=k3y&sslrootcert=/etc/ca.pem",
            "postgresql://u:***@db/x?sslpassword=***&sslrootcert=/etc/ca.pem",
        ),
        ("http://127.0.0.1:8080", "http://127.0.0.1:8080"),
        ("sqlite:///home/me/offload.db", "sqlite:///home/me/offload.db"),
        ("not a url", "not a url"),
    ],
)
def test_a_url_is_shown_without_its_password(url: str, shown: str) -> None:
    assert redact_url(url) == shown


def test_a_password_holding_an_at_sign_never_leaks() -> None:
    shown = redact_url("postgresql://alice:pa@ss:w0rd@db:5432/x")
    assert "pa" not in shown.split("@")[0].split(":", 2)[-1]
    assert "w0rd" not in shown and shown.endswith("@db:5432/x")


def test_an_unparseable_url_hides_everything_after_the_scheme() -> None:
    assert redact_url("postgresql://u:secret@[::1/x") == "postgresql://***"


def test_every_credential_setting_is_recognised_by_its_name() -> None:
    secret = {key for key, _, _ in explain(Settings()) if is_secret(key)}
    assert secret == {
        "mcp.bearer_token",
        "proxy.bearer_token",
        "gateway.bearer_token",
        "local_model.api_key",
    }
    assert not is_secret("proxy.tokenize_timeout_s")
    assert not is_secret("local_model.compress_target_tokens")


def test_a_setting_is_shown_with_its_credential_masked_and_its_url_redacted() -> None:
    assert redact_setting("proxy.bearer_token", "abc") == "***"
    assert redact_setting("proxy.bearer_token", "") == ""
    assert redact_setting("proxy.upstream", "http://u:pw@h:1/v1") == "http://u:***@h:1/v1"
    assert redact_setting("proxy.port", 8900) == 8900
