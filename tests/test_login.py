"""The dashboard's login: a form, a server-side session, never the token in a URL or a cookie
(issue 13)."""

from __future__ import annotations

from fastapi.testclient import TestClient

from api_world import ADMIN, World
from budgeteer.api import ApiContext, create_app
from budgeteer.api.sessions import COOKIE
from budgeteer.clock import ManualClock


def _login(http: TestClient, token: str) -> str:
    r = http.post("/login", data={"token": token}, follow_redirects=False)
    assert r.status_code == 303, r.text
    assert r.headers["location"] == "/"
    http.cookies.clear()  # each request below says which session it carries
    return r.cookies[COOKIE]


def _page(http: TestClient, session: str) -> int:
    return http.get("/", headers={"cookie": f"{COOKIE}={session}"}).status_code


def test_a_browser_without_a_session_gets_the_login_form(world: World) -> None:
    r = world.http.get("/", headers={"accept": "text/html"}, follow_redirects=False)
    assert (r.status_code, r.headers["location"]) == (303, "/login")
    form = world.http.get("/login")
    assert form.status_code == 200
    assert '<form method="post" action="/login">' in form.text
    assert world.http.get("/", headers={"accept": "application/json"}).status_code == 401


def test_the_token_never_goes_in_the_url_nor_in_the_cookie(world: World) -> None:
    r = world.http.get(f"/login?token={world.growth}", follow_redirects=False)
    assert r.status_code == 400
    assert "does not go in the address" in r.text
    assert COOKIE not in r.cookies
    assert "budgeteer_token" not in r.cookies
    r = world.http.post("/login", data={"token": world.growth}, follow_redirects=False)
    header = r.headers["set-cookie"]
    assert world.growth not in header
    assert "HttpOnly" in header
    assert "SameSite=strict" in header or "SameSite=Strict" in header
    assert "Secure" not in header  # plain HTTP here (see the TLS test for Secure)
    assert r.cookies[COOKIE] != world.growth


def test_wrong_tokens_and_job_tokens_do_not_log_in(world: World) -> None:
    for token in ("bgt_not-a-real-token", "", "job.x." + "0" * 64, "x" * 600):
        r = world.http.post("/login", data={"token": token}, follow_redirects=False)
        assert r.status_code == 401, token
        assert COOKIE not in r.cookies


def test_a_session_shows_that_teams_page_and_is_shared_by_every_process(world: World) -> None:
    session = _login(world.http, world.growth)
    assert _page(world.http, session) == 200
    # another process of the same service (``--workers``): same store, its own memory
    other = ApiContext(
        store=world.store,
        catalog=world.ctx.catalog,
        clock=world.clock,
        snapshot=world.ctx.snapshot,
        admin_token=ADMIN,
        secret_key=world.ctx.secret_key,
    )
    with TestClient(create_app(other)) as second:
        assert _page(second, session) == 200
        assert _page(second, "made-up") == 401


def test_logout_revocation_and_expiry_end_a_session(world: World) -> None:
    wall = ManualClock(world.clock.now())
    world.ctx.wall_clock = wall
    session = _login(world.http, world.growth)
    world.http.post("/logout", headers={"cookie": f"{COOKIE}={session}"})
    assert _page(world.http, session) == 401

    session = _login(world.http, world.search)
    wall.advance(world.ctx.session_hours * 3600 - 60)
    assert _page(world.http, session) == 200
    world.clock.advance(86400 * 30)  # the service's clock does not shorten a login
    assert _page(world.http, session) == 200
    wall.advance(120)
    assert _page(world.http, session) == 401

    session = _login(world.http, world.growth)
    token_id = next(
        t["id"]
        for t in world.http.get("/v1/tokens", headers=world.auth(ADMIN)).json()["tokens"]
        if t["teams"] == ["growth"]
    )
    world.http.post(f"/v1/tokens/{token_id}/revoke", headers=world.auth(ADMIN))
    world.ctx.forget_tokens()
    assert _page(world.http, session) == 401


def test_an_admin_session_ends_when_the_admin_token_changes(world: World) -> None:
    session = _login(world.http, ADMIN)
    assert _page(world.http, session) == 200
    world.ctx.admin_token = "a-new-admin-token-0123456789"
    assert _page(world.http, session) == 401


def test_the_form_cannot_be_posted_from_another_site(world: World) -> None:
    r = world.http.post(
        "/login",
        data={"token": world.growth},
        headers={"origin": "https://evil.example"},
        follow_redirects=False,
    )
    assert r.status_code == 403
    assert COOKIE not in r.cookies


def test_the_cookie_is_secure_over_tls(world: World) -> None:
    with TestClient(world.http.app, base_url="https://testserver") as https:
        r = https.post("/login", data={"token": world.growth}, follow_redirects=False)
        assert "Secure" in r.headers["set-cookie"]
