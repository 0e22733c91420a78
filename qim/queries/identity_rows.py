"""AUTH's token lookup as one SQL statement into the two instances a connection keeps.

Through the ORM, `select_related("device__user__tenant")` compiled the query for every burst
and made a token, a device, a user and a tenant instance per row (docs/performance.md, "Issue
22: reconnect storms", third round). A connection keeps the User (handed to every action as
`conn.user`) with its Tenant cached on it, and of the token and device only the digest, the
issue time and the device id: those are read as plain columns, the User and Tenant are built
with `Model.from_db` from their columns, converted as Django's compiler would convert them."""

from __future__ import annotations

from datetime import datetime
from functools import cache
from typing import Any

from django.db import connection
from django.db.models import Model

from qim.models import Device, DeviceToken, Tenant, User


class TokenRow:
    """A live token's row: what identities_for_tokens reads of the token and its device."""

    __slots__ = ("digest", "created_at", "device_id", "user")

    def __init__(self, digest: str, created_at: datetime, device_id: str, user: User) -> None:
        self.digest = digest
        self.created_at = created_at
        self.device_id = device_id
        self.user = user


def _converted(model: type[Model], alias: str, values: tuple[Any, ...]) -> list[Any]:
    """Each column's value as the ORM would give it (SQLite's datetimes are text, say)."""
    return [_convert(value, column) for column, value in zip(_columns(model, alias), values)]


def _convert(value: Any, column: tuple[Any, list[Any]]) -> Any:
    """One value through its column's converters (`_with_converters`)."""
    col, converters = column
    for converter in converters:
        value = converter(value, col, connection)
    return value


@cache
def _columns(model: type[Model], alias: str) -> list[tuple[Any, list[Any]]]:
    """Each concrete column of `model` under `alias`, with the converters the compiler applies."""
    return [_with_converters(field, alias) for field in model._meta.concrete_fields]


def _with_converters(field: Any, alias: str) -> tuple[Any, list[Any]]:
    column = field.get_col(alias)
    return column, connection.ops.get_db_converters(column) + field.get_db_converters(connection)


@cache
def _select(expiring: bool) -> str:
    """Up to its digest list: the token's digest and issue time, its device's id, then every
    column of its user and of the user's tenant. Built once from the models' metadata."""
    q = connection.ops.quote_name

    def col(model: type[Model], name: str) -> str:
        return q(model._meta.get_field(name).column)

    user_cols = ", ".join(f"u.{q(f.column)}" for f in User._meta.concrete_fields)
    tenant_cols = ", ".join(f"n.{q(f.column)}" for f in Tenant._meta.concrete_fields)
    return (
        f"SELECT t.{col(DeviceToken, 'digest')}, t.{col(DeviceToken, 'created_at')}, d.{col(Device, 'device_id')}, "
        f"{user_cols}, {tenant_cols} FROM {q(DeviceToken._meta.db_table)} t "
        f"INNER JOIN {q(Device._meta.db_table)} d ON d.{q(Device._meta.pk.column)} = t.{col(DeviceToken, 'device')} "
        f"INNER JOIN {q(User._meta.db_table)} u ON u.{q(User._meta.pk.column)} = d.{col(Device, 'user')} "
        f"INNER JOIN {q(Tenant._meta.db_table)} n ON n.{q(Tenant._meta.pk.column)} = u.{col(User, 'tenant')} "
        f"WHERE u.{col(User, 'is_active')} = %s "
        + (f"AND t.{col(DeviceToken, 'created_at')} > %s " if expiring else "")
        + f"AND t.{col(DeviceToken, 'digest')} IN "
    )


def token_rows(digests: set[str], issued_after: datetime | None) -> dict[str, TokenRow]:
    """The live tokens among `digests` (user active, issued after `issued_after` when given),
    by digest; each with a User of its own whose tenant is cached on it, as select_related gave."""
    if not digests:
        return {}
    params: list[Any] = [True]
    if issued_after is not None:
        params.append(DeviceToken._meta.get_field("created_at").get_db_prep_value(issued_after, connection))
    params.extend(digests)
    statement = _select(issued_after is not None) + "(" + ", ".join(["%s"] * len(digests)) + ")"
    with connection.cursor() as cursor:
        cursor.execute(statement, params)
        return {row[0]: _token_row(row) for row in cursor.fetchall()}


def _token_row(row: tuple[Any, ...]) -> TokenRow:
    users_end = 3 + len(User._meta.concrete_fields)
    user = User.from_db(connection.alias, None, _converted(User, "u", row[3:users_end]))
    tenant = Tenant.from_db(connection.alias, None, _converted(Tenant, "n", row[users_end:]))
    User._meta.get_field("tenant").set_cached_value(user, tenant)
    return TokenRow(row[0], _issued_at(row[1]), row[2], user)


def _issued_at(value: Any) -> datetime:
    return _convert(value, _issued_column())


@cache
def _issued_column() -> tuple[Any, list[Any]]:
    return _with_converters(DeviceToken._meta.get_field("created_at"), "t")
