"""The people who sign in to the pages: the role groups of ``presets.roles`` and the first
admin. Each is created once and never changed afterwards, so running these on every release
(``manage.py bootstrap``) or every ``make run`` (``manage.py ensure_local_admin``) is safe:
an admin's password, once set, is changed only by a person (``manage.py changepassword``,
the admin's password page)."""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.core.validators import validate_email
from django.db import IntegrityError, transaction

from presets.roles import ONCALL_GROUP, VIEWER_GROUP

ROLE_GROUPS = (VIEWER_GROUP, ONCALL_GROUP)


class AdminRefused(Exception):
    """No admin was created: ``field`` (username, email or password) was not acceptable."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class Admin:
    """What ``ensure_admin`` found or made."""

    username: str
    created: bool
    is_superuser: bool
    # Set only when this call created the admin with a password it generated: the one
    # chance to show it.
    generated_password: str | None = None


def ensure_role_groups() -> list[str]:
    """Create the role groups that are missing (``viewer`` reads, ``oncall`` changes); returns
    the names it created."""
    return [name for name in ROLE_GROUPS if Group.objects.get_or_create(name=name)[1]]


def ensure_admin(*, username: str, email: str = "", password: str = "") -> Admin:
    """The superuser ``username``, created with ``password`` (checked against the password
    validators) or, when it is blank, with a generated one. A user of that name that exists
    already is returned exactly as it is: its password is never changed here."""
    User = get_user_model()
    existing = User.objects.filter(username=username).first()
    if existing is not None:
        return Admin(username=username, created=False, is_superuser=existing.is_superuser)
    _check("username", username, lambda value: User._meta.get_field("username").clean(value, None))
    if email:
        _check("email", email, validate_email)
    generated = None
    if not password:
        password = generated = secrets.token_urlsafe(16)
    else:
        try:
            validate_password(password, User(username=username, email=email))
        except ValidationError as exc:
            raise AdminRefused("password", "the password is too weak: " + " ".join(exc.messages)) from None
    try:
        with transaction.atomic():
            User.objects.create_superuser(username, email, password)
    except IntegrityError:
        # Another release step created it meanwhile: theirs stands.
        return Admin(username=username, created=False, is_superuser=True)
    return Admin(username=username, created=True, is_superuser=True, generated_password=generated)


def _check(field: str, value: str, validator: Callable[[str], None]) -> None:
    try:
        validator(value)
    except ValidationError as exc:
        raise AdminRefused(field, f"{value!r} is not a valid {field}: {' '.join(exc.messages)}") from None
