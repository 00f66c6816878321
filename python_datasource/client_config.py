"""``kafka.*`` options -> confluent-kafka (librdkafka) settings, and which of them are secret.

Spark's Kafka source passes ``kafka.<name>`` to the Java client; we pass ``<name>`` to librdkafka:
as is when both clients spell it the same, translated where the Java spelling differs (a
``sasl.jaas.config`` Plain/Scram login -> ``sasl.username`` / ``sasl.password``, a PEM trust
store -> ``ssl.ca.location``, ``fetch.max.wait.ms`` -> ``fetch.wait.max.ms``, the socket
buffer sizes), dropped when it only tunes the Java client, refused (with the
option to use instead) where the source owns the behaviour.

Secret rule: a setting is secret when librdkafka flags it sensitive (``_RK_SENSITIVE`` in
``rdkafka_conf.c``: :data:`LIBRDKAFKA_SENSITIVE`) or its name matches :data:`SECRET_PATTERN`
(password, passphrase, secret, jaas, token, credential, ``.pem``, private.key, ``ssl_key``).
Secret values live apart from the other settings, in :class:`KafkaSecrets`, whose ``repr`` never
shows them; they can be dropped so that only their names travel (``emit = ranges`` rows) and be
restored from what the reading side was given (``OrderedStateful(kafka_options=...)``).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from orderedstream.core.errors import InvariantError, KafkaAuthenticationError, OptionError

log = logging.getLogger(__name__)

#: What confluent-kafka's clients take as configuration values.
Settings = dict[str, str | int | float | bool]

#: librdkafka's settings flagged ``_RK_SENSITIVE`` (its own logs redact them).
LIBRDKAFKA_SENSITIVE = frozenset({
    "sasl.username", "sasl.password", "sasl.oauthbearer.config",
    "sasl.oauthbearer.client.secret", "sasl.oauthbearer.assertion.private.key.file",
    "sasl.oauthbearer.assertion.private.key.passphrase",
    "sasl.oauthbearer.assertion.private.key.pem", "ssl.key.location", "ssl.key.password",
    "ssl.key.pem", "ssl_key", "ssl.ca.pem", "ssl.keystore.password",
})
#: Any other setting whose name matches this is secret too (case-insensitive search).
SECRET_PATTERN = re.compile(
    r"password|passphrase|secret|jaas|token|credential|\.pem|private\.key|ssl_key", re.I)

# Kafka client settings Spark refuses, with the reason it gives.
_REJECTED = {
    "auto.offset.reset": "set the source option 'startingOffsets' instead "
                         "(earliest | latest | JSON offsets)",
    "key.deserializer": "keys are always returned as binary; cast or decode them in a "
                        "DataFrame operation",
    "value.deserializer": "values are always returned as binary; cast or decode them in a "
                          "DataFrame operation",
    "enable.auto.commit": "the source tracks offsets in Spark's checkpoint; use the option "
                          "'commitOffsetsToGroup' to publish progress to a consumer group",
    "interceptor.classes": "consumer interceptors are not supported",
}

# Java-client-only settings with no librdkafka meaning: dropped (they only tune the JVM client;
# the trust store password only unlocks a JKS store, which librdkafka cannot read anyway).
_JAVA_ONLY = frozenset({
    "max.poll.records", "default.api.timeout.ms", "retry.backoff.max.ms",
    "ssl.endpoint.identification.algorithm.disabled", "client.dns.lookup",
    "partition.assignment.strategy", "ssl.truststore.password",
})

# Java client settings librdkafka spells differently: renamed (the Java spelling is what users of
# Spark's Kafka source write; librdkafka would refuse it as an unknown property).
_JAVA_RENAMED = {
    "fetch.max.wait.ms": "fetch.wait.max.ms",
    "receive.buffer.bytes": "socket.receive.buffer.bytes",
    "send.buffer.bytes": "socket.send.buffer.bytes",
}

# librdkafka consumer-only settings: not passed to the admin client (it would warn about each).
_CONSUMER_ONLY_PREFIXES = ("isolation.level", "fetch.", "max.partition.fetch.bytes", "queued.",
                           "session.timeout.ms", "heartbeat.interval.ms", "group.",
                           "enable.partition.eof", "check.crcs", "auto.commit",
                           "max.poll.interval.ms", "partition.assignment.strategy",
                           "enable.auto.offset.store", "consume.callback.max.messages")

_REDACTED = "<redacted>"

# librdkafka error names meaning the cluster refused the client's login.
_LOGIN_REFUSED = frozenset({"_AUTHENTICATION", "SASL_AUTHENTICATION_FAILED"})


def is_secret(name: str) -> bool:
    """Whether the setting ``name`` (with or without the ``kafka.`` prefix) is secret.

    Parameters
    ----------
    name
        A librdkafka setting or ``kafka.*`` option (case-insensitive).

    Runs on
    -------
    both
    """
    bare = name.lower().removeprefix("kafka.")
    return bare in LIBRDKAFKA_SENSITIVE or SECRET_PATTERN.search(bare) is not None


@dataclass(frozen=True, kw_only=True, repr=False)
class KafkaSecrets:
    """The secret librdkafka settings of one source, apart from the others.

    ``origins`` pairs each setting with the ``kafka.*`` option it came from (what the user
    wrote, so errors can name it). ``values`` is None once dropped: then only the names travel,
    and :meth:`restored` takes the values from what the reading side was given.
    """

    origins: tuple[tuple[str, str], ...] = ()
    values: Mapping[str, str] | None = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.values is not None and set(self.values) != set(self.names):
            raise InvariantError(f"KafkaSecrets: values for {sorted(self.values)} but "
                                 f"origins name {list(self.names)}")

    def __repr__(self) -> str:
        state = "dropped" if self.values is None else _REDACTED
        return f"KafkaSecrets(options={list(self.options)}, values={state})"

    __str__ = __repr__

    @property
    def names(self) -> tuple[str, ...]:
        """The librdkafka settings (e.g. ``sasl.password``)."""
        return tuple(name for name, _ in self.origins)

    @property
    def options(self) -> tuple[str, ...]:
        """The ``kafka.*`` options they came from (e.g. ``kafka.sasl.jaas.config``)."""
        return tuple(sorted({option for _, option in self.origins}))

    @property
    def dropped(self) -> bool:
        """Whether the values were dropped (only the names travel)."""
        return self.values is None

    def without_values(self) -> KafkaSecrets:
        """The same names without the values: what may be written into a row."""
        return replace(self, values=None) if self.origins else self

    def settings(self) -> dict[str, str]:
        """The values, for a client's configuration; OptionError when they were dropped."""
        if self.values is None:
            raise OptionError(
                f"the Kafka client needs the secret options {', '.join(self.options)}, whose "
                f"values are never written into orderedkafka rows; {_PASS_HINT}"
                f"{_example(self.options)}")
        return dict(self.values)

    def restored(self, given: KafkaSecrets) -> KafkaSecrets:
        """These secrets with the values from ``given`` (the settings a consumer of
        ``emit = ranges`` rows was handed); itself when its values were not dropped.

        Parameters
        ----------
        given
            The secrets the reading side was given (:func:`secrets_from_options`).

        Raises
        ------
        OptionError
            ``given`` lacks a value, naming the options and how to pass them.

        Runs on
        -------
        executor (the stage reading the ranges)
        """
        if self.values is not None:
            return self
        provided = given.values or {}
        missing = [(name, option) for name, option in self.origins if name not in provided]
        if missing:
            options = sorted({option for _, option in missing})
            raise OptionError(
                f"the orderedkafka rows were planned with the secret Kafka options "
                f"{', '.join(self.options)}; their values are never written into rows and "
                f"were not given here (missing: {', '.join(options)}, librdkafka "
                f"{', '.join(name for name, _ in missing)}). {_PASS_HINT}"
                f"{_example(options)}")
        return replace(self, values={name: provided[name] for name in self.names})

    def redact(self, text: str) -> str:
        """``text`` with every secret value replaced by ``<redacted>`` (for messages that quote a
        client).

        Parameters
        ----------
        text
            The text to redact.

        Runs on
        -------
        both
        """
        for value in sorted((self.values or {}).values(), key=len, reverse=True):
            if value:
                text = text.replace(value, _REDACTED)
        return text


_PASS_HINT = ("Pass the same secret kafka.* options to the stage that reads the ranges: ")


def _example(options: tuple[str, ...] | list[str]) -> str:
    keys = ", ".join(f"{option!r}: ..." for option in options)
    return f"OrderedStateful(..., kafka_options={{{keys}}})"


def _bad(option: str, value: object, accepted: str) -> OptionError:
    return OptionError(f"option '{option}' = {value!r} is invalid: accepted {accepted}")


def kafka_settings(opts: Mapping[str, Any]) -> tuple[dict[str, str], KafkaSecrets]:
    """librdkafka settings from the ``kafka.*`` entries of ``opts``: renamed, translated or dropped
    as the module says; other keys and ``kafka.bootstrap.servers`` are skipped.

    Parameters
    ----------
    opts
        The source's options, keys lower-cased.

    Returns
    -------
    tuple[dict[str, str], KafkaSecrets]
        The public settings, and the secret ones apart.

    Raises
    ------
    OptionError
        A setting the source owns, one given twice in two spellings, a JAAS config without
        username and password, a non-PEM trust store, a non-PKCS12 key store or a bad
        ``isolation.level``.

    Runs on
    -------
    driver
    """
    params: dict[str, str] = {}
    origin: dict[str, str] = {}
    for key, value in opts.items():
        if not key.startswith("kafka."):
            continue
        name = key[len("kafka."):]
        if name in _REJECTED:
            raise OptionError(f"Kafka option 'kafka.{name}' is not supported: {_REJECTED[name]}")
        if name in _JAVA_ONLY or name == "bootstrap.servers":
            continue
        name = _JAVA_RENAMED.get(name, name)
        if name in params:  # both spellings given: the same setting twice
            raise OptionError(f"Kafka options '{origin[name]}' and '{key}' set the same "
                              f"librdkafka setting '{name}': give one of them")
        params[name] = str(value)
        origin[name] = key
    jaas = params.pop("sasl.jaas.config", None)
    if jaas is not None:
        found = dict(re.findall(r'(username|password)\s*=\s*"([^"]*)"', jaas))
        if "username" not in found or "password" not in found:
            raise _bad("kafka.sasl.jaas.config", _REDACTED,
                       'a PlainLoginModule/ScramLoginModule entry with username="..." '
                       'password="..." (or set kafka.sasl.username / kafka.sasl.password)')
        for name in ("username", "password"):
            if f"sasl.{name}" not in params:
                params[f"sasl.{name}"] = found[name]
                origin[f"sasl.{name}"] = "kafka.sasl.jaas.config"
    store_type = params.pop("ssl.truststore.type", "JKS").upper()  # Java default
    truststore = params.pop("ssl.truststore.location", None)
    if truststore is not None:
        if store_type != "PEM":
            raise _bad("kafka.ssl.truststore.type", store_type,
                       "PEM (librdkafka reads no JKS/PKCS12 trust stores; set "
                       "kafka.ssl.ca.location to a PEM file)")
        if "ssl.ca.location" not in params:
            params["ssl.ca.location"] = truststore
            origin["ssl.ca.location"] = "kafka.ssl.truststore.location"
    key_type = params.pop("ssl.keystore.type", "PKCS12").upper()
    if key_type != "PKCS12" and "ssl.keystore.location" in params:
        raise _bad("kafka.ssl.keystore.type", key_type, "PKCS12 (librdkafka reads no JKS)")
    isolation = params.get("isolation.level")
    if isolation is not None and isolation not in ("read_committed", "read_uncommitted"):
        raise _bad("kafka.isolation.level", isolation, "'read_uncommitted' or 'read_committed'")
    secret = sorted(name for name in params if is_secret(name))
    secrets = KafkaSecrets(origins=tuple((name, origin[name]) for name in secret),
                           values={name: params.pop(name) for name in secret})
    return params, secrets


def secrets_from_options(options: Mapping[str, Any] | None, *,
                         owner: str = "OrderedStateful(kafka_options=...)") -> KafkaSecrets:
    """The secrets among ``kafka.*`` options handed to the reading side of ``emit = ranges`` rows
    (the other settings come from the rows, so they are ignored here).

    Parameters
    ----------
    options
        The ``kafka.*`` options (string values); None for none.
    owner
        How errors name where the options were given.

    Returns
    -------
    KafkaSecrets
        The secrets, with their values.

    Raises
    ------
    OptionError
        ``options`` is not a mapping, a key is not a ``kafka.*`` option, a value is not a string,
        or :func:`kafka_settings` refuses them.

    Runs on
    -------
    driver
    """
    if options is None:
        return KafkaSecrets()
    if not isinstance(options, Mapping):
        raise OptionError(f"{owner}: a mapping of kafka.* options is required, got "
                          f"{type(options).__name__}")
    opts: dict[str, str] = {}
    for key, value in options.items():
        if not isinstance(key, str) or not key.lower().startswith("kafka."):
            raise OptionError(f"{owner}: {key!r} is not a kafka.* option; accepted are the "
                              "source's secret kafka.* options, e.g. kafka.sasl.jaas.config, "
                              "kafka.sasl.password, kafka.ssl.key.password")
        if not isinstance(value, str):
            raise OptionError(f"{owner}: the value of {key!r} must be a string, got "
                              f"{type(value).__name__}")
        opts[key.lower()] = value
    return kafka_settings(opts)[1]


def admin_settings(config: Mapping[str, Any]) -> Settings:
    """An AdminClient's settings: the client configuration less the consumer-only settings.

    Parameters
    ----------
    config
        The client configuration (public settings and secrets).

    Runs on
    -------
    driver
    """
    return {k: v for k, v in config.items() if not k.startswith(_CONSUMER_ONLY_PREFIXES)}


def consumer_settings(config: Mapping[str, Any], group_id: str) -> Settings:
    """An executor's consumer settings: no group management, no auto commit, out-of-range is an
    error (never a silent reset), partition EOF reported so the end is recognised. Fetches are
    larger than librdkafka's defaults, since a task reads one partition to its end; the
    ``kafka.*`` options win over those sizes.

    Parameters
    ----------
    config
        The client configuration (public settings and secrets).
    group_id
        The consumer's ``group.id`` (no group is joined).

    Returns
    -------
    Settings
        The consumer's configuration.

    Runs on
    -------
    executor
    """
    conf: Settings = {"queued.max.messages.kbytes": 65536,
                      "max.partition.fetch.bytes": 8 * 1024 * 1024,
                      "fetch.max.bytes": 64 * 1024 * 1024, **config}
    conf.update({"group.id": group_id, "enable.auto.commit": False,
                 "enable.auto.offset.store": False, "enable.partition.eof": True,
                 "auto.offset.reset": "error"})
    return conf


def client_error(exc: Exception, secrets: KafkaSecrets) -> OptionError:
    """A client constructor's failure (it only fails on configuration) as an ``OptionError``
    that names the ``kafka.*`` setting, secret values redacted.

    Parameters
    ----------
    exc
        The constructor's exception.
    secrets
        The client's secrets, to redact from the message.

    Returns
    -------
    OptionError
        The error to raise.

    Runs on
    -------
    both
    """
    return OptionError(f"a kafka.* option was refused by the Kafka client (librdkafka): "
                       f"{secrets.redact(str(exc))}. Options after 'kafka.' must be librdkafka "
                       "settings (https://github.com/confluentinc/librdkafka/blob/master/"
                       "CONFIGURATION.md); Java-only settings have no effect here")


class ClientErrors:
    """``error_cb`` of one confluent-kafka client (driver admin or executor consumer).

    librdkafka reports a refused login only through this callback and keeps retrying, so
    without it wrong credentials look like an unreachable broker until a timeout. A refusal is
    kept for :meth:`check`; other errors are logged (once per distinct text, redacted), as
    librdkafka would log them without a callback.
    """

    def __init__(self, where: str, secrets: KafkaSecrets) -> None:
        self.where = where
        self.secrets = secrets
        self.refused: str | None = None
        self._last: str | None = None

    def __call__(self, err: Any) -> None:
        text = self.secrets.redact(err.str())
        if err.name() in _LOGIN_REFUSED:
            self.refused = text
        elif text != self._last:
            log.warning("orderedkafka: %s: Kafka client error: %s", self.where, text)
            self._last = text

    def check(self) -> None:
        """Raise KafkaAuthenticationError when the cluster refused the login (fails fast, as
        Spark's Java Kafka client does on an authentication failure)."""
        if self.refused is not None:
            raise KafkaAuthenticationError(
                f"{self.where}: the Kafka cluster refused the client's login ({self.refused}); "
                "check the secret kafka.* options (kafka.sasl.jaas.config, kafka.sasl.*, "
                "kafka.ssl.*), for emit=ranges also those given to "
                "OrderedStateful(kafka_options=...)")
