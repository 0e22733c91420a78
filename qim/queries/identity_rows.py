"""AUTH's token lookup as one SQL statement into the two instances a connection keeps.

Through the ORM, `select_related("device__user__tenant")` compiled the query for every burst
and made a token, a device, a user and a tenant instance per row (docs/performance.md,
"Lean handshake, upgrade, frame and per-socket paths"). A connection keeps the User (handed to
every action as `conn.user`) with its Tenant cached on it, and of the token and device only the
digest, the issue time and the device id: those are read as plain columns, the User and Tenant are built
with `Model.from_db` from their columns, converted as Django's compiler would convert them."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from functools import cache, partial
from typing import Any

from django.db import connection
from django.db.models import Model
from django.db.models.base import ModelState
from django.db.models.signals import post_init, pre_init

from qim.models import Device, DeviceToken, Tenant, User


class TokenRow:
    """A live token's row: what identities_for_tokens reads of the token and its device."""

    __slots__ = ("digest", "created_at", "device_id", "user")

    def __init__(self, digest: str, created_at: datetime, device_id: str, user: User) -> None:
        self.digest = digest
        self.created_at = created_at
        self.device_id = device_id
        self.user = user


def _converted(model: type[Model], alias: str, values: tuple[Any, ...], db: Any) -> list[Any]:
    """Each column's value as the ORM would give it (SQLite's datetimes are text, say): only the
    columns that have converters go through them, with the connection itself (not the proxy,
    whose every attribute is a thread-local lookup)."""
    converted = list(values)
    for index, col, converters in _converting_columns(model, alias):
        value = converted[index]
        for converter in converters:
            value = converter(value, col, db)
        converted[index] = value
    return converted


def _convert(value: Any, column: tuple[Any, list[Any]], db: Any) -> Any:
    """One value through its column's converters (`_with_converters`)."""
    col, converters = column
    for converter in converters:
        value = converter(value, col, db)
    return value


@cache
def _converting_columns(model: type[Model], alias: str) -> list[tuple[int, Any, list[Any]]]:
    """(position, column, converters) of each concrete column of `model` under `alias` whose
    value the compiler converts."""
    return [(index, col, converters)
            for index, (col, converters) in enumerate(_columns(model, alias)) if converters]


@cache
def _columns(model: type[Model], alias: str) -> list[tuple[Any, list[Any]]]:
    """Each concrete column of `model` under `alias`, with the converters the compiler applies."""
    return [_with_converters(field, alias) for field in model._meta.concrete_fields]


def _with_converters(field: Any, alias: str) -> tuple[Any, list[Any]]:
    column = field.get_col(alias)
    converters = connection.ops.get_db_converters(column) + field.get_db_converters(connection)
    return column, [_text_datetimes_first(converter) for converter in converters]


def _text_datetimes_first(converter: Any) -> Any:
    """SQLite's datetime converter with the text SQLite hands back read first by
    `_sqlite_datetime`; any other converter as it is."""
    from django.db.backends.sqlite3.operations import DatabaseOperations

    if getattr(converter, "__func__", None) is not DatabaseOperations.convert_datetimefield_value:
        return converter
    return partial(_sqlite_datetime, converter)


def _sqlite_datetime(django_converter: Any, value: Any, expression: Any, db: Any) -> Any:
    """Django's SQLite datetime conversion for the ISO text Django stores (three per AUTH's
    token row): `datetime.fromisoformat`, which Django's `parse_datetime` tries first, then the
    connection's time zone on a naive value when USE_TZ (`db.timezone` is None without it), as
    `make_aware` does; without a settings read and two awareness checks per value. Anything
    else goes through Django's converter."""
    if type(value) is not str:
        return django_converter(value, expression, db)
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return django_converter(value, expression, db)
    zone = db.timezone
    if zone is None or parsed.tzinfo is not None:
        return parsed
    return parsed.replace(tzinfo=zone)


def instance_from_db(model: type[Model], db_alias: str, values: list[Any]) -> Model:
    """`model.from_db(db_alias, None, values)` for a full row, without Model.__init__'s setattr
    per field and its two signals' sends when no receiver listens to them (a reconnect storm's
    AUTH built two instances per token: 6 us each, docs/performance.md,
    "Lean handshake, upgrade, frame and per-socket paths"). The same instance:
    every field's attname in `__dict__`, a ModelState not adding, on `db_alias`
    (tests/core/test_auth_batched.py compares it with from_db's). A model with an `__init__`
    of its own, or a signal receiver, goes through from_db."""
    if model.__init__ is not Model.__init__ or pre_init.has_listeners(model) or post_init.has_listeners(model):
        return model.from_db(db_alias, None, values)
    attnames = _attnames(model)
    if len(values) != len(attnames):
        raise ValueError(f"{model.__name__} has {len(attnames)} concrete fields, not {len(values)}")
    instance = model.__new__(model)
    state = ModelState()
    state.adding = False
    state.db = db_alias
    instance.__dict__["_state"] = state
    instance.__dict__.update(zip(attnames, values))
    return instance


@cache
def _attnames(model: type[Model]) -> tuple[str, ...]:
    return tuple(field.attname for field in model._meta.concrete_fields)


@cache
def _select(expiring: bool) -> str:
    """Up to its digest list: the token's digest and issue time, its device's id, then every
    column of its user and of the user's tenant. Built once from the models' metadata."""
    q = connection.ops.quote_name
    user_cols = ", ".join(f"u.{q(f.column)}" for f in User._meta.concrete_fields)
    tenant_cols = ", ".join(f"n.{q(f.column)}" for f in Tenant._meta.concrete_fields)
    return (
        f"SELECT t.{_col(DeviceToken, 'digest')}, t.{_col(DeviceToken, 'created_at')}, d.{_col(Device, 'device_id')}, "
        f"{user_cols}, {tenant_cols} FROM {q(DeviceToken._meta.db_table)} t "
        f"INNER JOIN {q(Device._meta.db_table)} d ON d.{q(Device._meta.pk.column)} = t.{_col(DeviceToken, 'device')} "
        f"INNER JOIN {q(User._meta.db_table)} u ON u.{q(User._meta.pk.column)} = d.{_col(Device, 'user')} "
        f"INNER JOIN {q(Tenant._meta.db_table)} n ON n.{q(Tenant._meta.pk.column)} = u.{_col(User, 'tenant')} "
        + _live_and_among(expiring)
    )


@cache
def _select_digests(expiring: bool) -> str:
    """Up to its digest list: the digests of live tokens, filtered as `_select` filters."""
    q = connection.ops.quote_name
    return (
        f"SELECT t.{_col(DeviceToken, 'digest')} FROM {q(DeviceToken._meta.db_table)} t "
        f"INNER JOIN {q(Device._meta.db_table)} d ON d.{q(Device._meta.pk.column)} = t.{_col(DeviceToken, 'device')} "
        f"INNER JOIN {q(User._meta.db_table)} u ON u.{q(User._meta.pk.column)} = d.{_col(Device, 'user')} "
        + _live_and_among(expiring)
    )


def _live_and_among(expiring: bool) -> str:
    """live_tokens()'s filter (an active user; issued after a moment when tokens expire), then
    the start of the digest list."""
    return (
        f"WHERE u.{_col(User, 'is_active')} = %s "
        + (f"AND t.{_col(DeviceToken, 'created_at')} > %s " if expiring else "")
        + f"AND t.{_col(DeviceToken, 'digest')} IN "
    )


def _col(model: type[Model], name: str) -> str:
    return connection.ops.quote_name(model._meta.get_field(name).column)


def _params(digests: Iterable[str], issued_after: datetime | None) -> list[Any]:
    params: list[Any] = [True]
    if issued_after is not None:
        params.append(DeviceToken._meta.get_field("created_at").get_db_prep_value(issued_after, connection))
    params.extend(digests)
    return params


def live_digests(digests: list[str], issued_after: datetime | None) -> set[str]:
    """Which of `digests` are live tokens' (user active, issued after `issued_after` when
    given): the node's periodic re-check of its sockets, as one statement without the ORM's
    compile of an IN list (a parameter prepared per digest: 2 % of a storm's samples while a
    re-check slice ran, docs/performance.md,
    "Idle cost: the timing wheel and the kernel's TCP keepalive")."""
    if not digests:
        return set()
    statement = _select_digests(issued_after is not None) + "(" + ", ".join(["%s"] * len(digests)) + ")"
    with connection.cursor() as cursor:
        cursor.execute(statement, _params(digests, issued_after))
        return {row[0] for row in cursor.fetchall()}


def token_rows(digests: set[str], issued_after: datetime | None) -> dict[str, TokenRow]:
    """The live tokens among `digests` (user active, issued after `issued_after` when given),
    by digest; each with a User of its own whose tenant is cached on it, as select_related gave."""
    if not digests:
        return {}
    statement = _select(issued_after is not None) + "(" + ", ".join(["%s"] * len(digests)) + ")"
    with connection.cursor() as cursor:
        cursor.execute(statement, _params(digests, issued_after))
        db = cursor.db  # the connection itself, once, not through the thread-local proxy per row
        return {row[0]: _token_row(row, db) for row in cursor.fetchall()}


def _token_row(row: tuple[Any, ...], db: Any) -> TokenRow:
    users_end = 3 + len(_attnames(User))
    user = instance_from_db(User, db.alias, _converted(User, "u", row[3:users_end], db))
    tenant = instance_from_db(Tenant, db.alias, _converted(Tenant, "n", row[users_end:], db))
    User._meta.get_field("tenant").set_cached_value(user, tenant)
    return TokenRow(row[0], _convert(row[1], _issued_column(), db), row[2], user)


@cache
def _issued_column() -> tuple[Any, list[Any]]:
    return _with_converters(DeviceToken._meta.get_field("created_at"), "t")
