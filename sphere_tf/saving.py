"""Serialized sphere_tf objects record the package version that wrote them; a newer format is refused clearly.

Every Keras class of the package (layers, losses, metrics, regularizers, initializers, optimizers, callbacks,
training models) is registered with `register_serializable()` instead of
`keras.saving.register_keras_serializable(package="sphere_tf")`. Besides registering the class under
``sphere_tf>ClassName``, it wraps the class's `get_config` and `from_config`:

- `get_config()` adds ``"sphere_tf_version": sphere_tf.__version__`` to the config, so every `.keras` file
  (its `config.json`) and every serialized config names the release that wrote each sphere_tf object. (Not for
  a user's subclass that overrides `from_config`: that method would not expect the key.)
- `from_config(config)` removes that key before the class sees the config, and raises `NewerFileError` when it
  names a newer major or minor release than the installed one (`version.newer_format`): that release may have
  added a config key or changed a weight's layout that this one would misread. A newer patch release writes the
  same format and loads silently; so does a config without the key (files written by 0.1.0, which recorded
  none) or an older version.

`NewerFileError` is a `ValueError`. Keras's `deserialize_keras_object` re-raises a `TypeError` from
`from_config` as "could not be deserialized properly" with the whole config, but lets other exceptions through,
so `keras.saving.load_model` raises this one unchanged, with its message. Keras's layers, though, re-raise any
error of their constructor as a `TypeError` ("Error when deserializing class ..."), and a layer's constructor is
where its regularizers and initializers are rebuilt: so each wrapped `from_config` checks the objects serialized
inside its config before anything is built (a sphere_tf layer checks its sphere_tf regularizer; the package's
training models check the whole model). A sphere_tf object inside one of Keras's own layers (an `MHE`
regularizer on a `keras.layers.Conv2D`) still reaches the user as Keras's `TypeError`, whose message ends with
this one; `check_keras_file(path)` before `load_model` raises the error itself. An object whose class the
installed release does not have at all fails in Keras's class lookup ("Could not locate class
'sphere_tf>...'"); the config Keras prints with that error shows the recorded version.

Untrusted files: `load_model` loads with Keras's `safe_mode=True` unless told otherwise, and `check_keras_file`
refuses, from `config.json` alone and before Keras reads anything else, a Python lambda anywhere in it (a Lambda
layer's, or one in a slot of a sphere_tf or Keras object: the refusal of safe mode, naming the file and the place,
also after `keras.config.enable_unsafe_deserialization()`, which Keras's own loader lets win over an explicit
`safe_mode=True`), a `config.json` larger than `MAX_CONFIG_BYTES` (a zip bomb) and a `sphere_tf>` class the
installed release does not register (`UnknownClassError`, naming the class, the object and the file: Keras's own
error names the class by its bare `class_name`, which the file may set to anything). No `from_config` of the package evaluates, unpickles or
unmarshals anything from a config; a `__lambda__` inside one is handed to Keras's deserializer first
(`_checked`), so that a safe-mode refusal is Keras's `ValueError` itself and not a layer's `TypeError` around it.

Step checkpoints record the version in their own metadata (`sphere_tf.training.checkpoint`) and refuse a newer
format with the same `NewerFileError` (`check_version`).

Subclasses: a registered class whose registered base already wraps the method it inherits is not wrapped again;
one that defines its own `get_config` / `from_config` gets its own wrapper (removing the key a second time finds
nothing, so a `super().from_config(...)` chain checks once). A class that inherits `from_config` from Keras calls
that base method (resolved at call time, so Keras's functional-model class injection is respected); a class
without any `from_config` (Keras callbacks have none) gets ``cls(**config)``, as Keras's layers and losses do.
"""

import functools
import json
import os
import zipfile

import keras

from sphere_tf import version

PACKAGE = "sphere_tf"
# The config key that records the writing release.
VERSION_KEY = "sphere_tf_version"
# Marks a wrapper of this module (so that a subclass does not wrap it again).
_MARK = "_sphere_tf_versioned"


class NewerFileError(ValueError):
    """A file (a `.keras` file's object, a checkpoint) written by a newer major or minor sphere_tf release than
    the installed one; the message names the object or file, both versions and the release to upgrade to."""


class UnknownClassError(ValueError):
    """A `.keras` file names a `sphere_tf>` class that the installed sphere_tf does not register; the message
    names the class, the object, the file and the release that wrote it."""


# The largest `config.json` `check_keras_file` reads: a deep model's config is a few MB, and a `.keras` file whose
# config declares (or expands to) more is refused before it is read (a zip bomb would otherwise fill memory).
MAX_CONFIG_BYTES = 64 * 2**20


def newer_file_error(what, recorded, installed=None):
    """The `NewerFileError` for `what` (an object or a file) written by sphere_tf `recorded`."""
    installed = installed or version.__version__
    needed = version.format_version(recorded)
    return NewerFileError(
        f"{what} was written by sphere_tf {recorded}, a newer release than the installed sphere_tf {installed} "
        f"(which reads files of sphere_tf {version.format_version(installed)} and older: {needed} may have changed "
        f"the format). Upgrade sphere_tf to >= {needed} (pip install --upgrade 'sphere_tf>={needed}') to load it.")


def check_version(recorded, what):
    """Raises `NewerFileError` when `recorded` (the version a file records, or None when it records none) is a
    newer major or minor release than the installed one; None, older and newer-patch versions pass.

    Raises:
        NewerFileError: see above.
        ValueError: `recorded` is not a version string (the message names `what`).
    """
    if recorded is None:
        return
    try:
        newer = version.newer_format(recorded)
    except ValueError:
        raise ValueError(f"{what} records {VERSION_KEY}={recorded!r}, which is not a sphere_tf version "
                         "(MAJOR.MINOR.PATCH); the file was edited or written by something else.") from None
    if newer:
        raise newer_file_error(what, recorded)


def _describe(registered_name, config):
    """'sphere_tf>MarginHead 'margin_head'': the registered name and, when the config has one, the object name."""
    name = config.get("name")
    return f"{registered_name} {name!r}" if isinstance(name, str) else registered_name


def _nested(value):
    """`(registered name, config)` of every sphere_tf object serialized inside `value` (Keras's
    `{"registered_name": "sphere_tf>...", "config": {...}}` dicts), outermost first."""
    if isinstance(value, dict):
        name = value.get("registered_name")
        if isinstance(name, str) and name.startswith(PACKAGE + ">") and isinstance(value.get("config"), dict):
            yield name, value["config"]
        for item in value.values():
            yield from _nested(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _nested(item)


def check_config(config, what=None):
    """`check_version` of every sphere_tf object recorded in a serialized config (a `.keras` file's
    `config.json`, `keras.saving.serialize_keras_object` output, an object's `get_config()`), each named by its
    registered name and object name (after `what`, e.g. the file, when given)."""
    for registered_name, inner in _nested(config):
        described = _describe(registered_name, inner)
        check_version(inner.get(VERSION_KEY), described if what is None else f"{described} in {what}")


def check_keras_file(path, custom_objects=None, safe_mode=True):
    """Raises `NewerFileError` when a sphere_tf object of the `.keras` file `path` was written by a newer major
    or minor sphere_tf release (the message names the object and the file); reads only its `config.json`.

    Also raises `UnknownClassError` for a `sphere_tf>` class that neither the package nor `custom_objects`
    registers (`check_classes`), `ValueError` for a `config.json` declaring more than `MAX_CONFIG_BYTES` or
    not holding JSON, and (unless `safe_mode` is False) a `ValueError` for a Python lambda anywhere in the config,
    naming the file and where the lambda sits: the refusal of Keras's safe mode, which Keras raises wrapped in the
    `TypeError`s of the layers around it when the lambda is nested in a Keras layer's object (a sphere_tf
    initializer's `base`).

    `keras.saving.load_model` raises the same error from the first such object it rebuilds, unless the object
    is nested in one of Keras's own layers (a sphere_tf regularizer or initializer of a `keras.layers.Dense`):
    Keras re-raises any error from a layer's constructor as a `TypeError` ("Error when deserializing class
    'Dense' ...") whose message ends with this one. Call this first to get the error itself. A path that is not a
    `.keras` archive is left to `load_model`'s own error.
    """
    if not zipfile.is_zipfile(path):
        return  # not a `.keras` archive (a missing file, a SavedModel folder): `load_model` reports it
    with zipfile.ZipFile(path) as archive:
        if "config.json" not in archive.namelist():
            return
        declared = archive.getinfo("config.json").file_size
        if declared > MAX_CONFIG_BYTES:
            raise ValueError(f"{os.fspath(path)}: its config.json declares {declared:,} bytes, more than the "
                             f"{MAX_CONFIG_BYTES:,} a model's config may hold (MAX_CONFIG_BYTES); refused before "
                             "reading it (a corrupt or hostile file).")
        with archive.open("config.json") as member:
            text = member.read(MAX_CONFIG_BYTES + 1)  # zipfile stops at the declared size; bounded regardless
    try:
        config = json.loads(text)
    except (ValueError, RecursionError) as error:  # not JSON, not UTF-8, or nested past the parser's depth
        raise ValueError(f"{os.fspath(path)}: its config.json is not a model config ({type(error).__name__}: "
                         f"{str(error)[:200]}).") from None
    check_config(config, what=os.fspath(path))
    check_classes(config, what=os.fspath(path), custom_objects=custom_objects)
    if safe_mode is not False:
        # Refused here from the config alone, bytecode unread (not through Keras's deserializer: after
        # `keras.config.enable_unsafe_deserialization()` it would rebuild the lambda even when asked for safe mode;
        # Keras's own `load_model(safe_mode=True)` scopes that flag away and refuses, as this does).
        for where, _ in _lambda_locations(config, "config"):
            raise ValueError(
                f"{os.fspath(path)}: {where}: Requested the deserialization of a Python lambda, refused in safe mode "
                "(Keras's safe_mode=True): rebuilding it would run marshalled bytecode from the file, which can do "
                "anything. If you trust the file, pass safe_mode=False to the loading function.")


def _lambda_locations(value, where):
    """`(where, serialized lambda)` of every Python lambda in a config, `where` its path of keys."""
    if isinstance(value, dict):
        if value.get("class_name") == "__lambda__":
            yield where, value
            return
        for key, item in value.items():
            yield from _lambda_locations(item, f"{where}[{key!r}]")
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            yield from _lambda_locations(item, f"{where}[{index}]")


def check_classes(config, what=None, custom_objects=None):
    """Raises `UnknownClassError` for the first `sphere_tf>` class of a serialized config (a `.keras` file's
    `config.json`) that neither the package nor `custom_objects` registers.

    Keras's own error for it ("Could not locate class 'X'") names the object's `class_name`, which a file may set
    to anything, and comes wrapped in the error of the model holding it.
    """
    for registered_name, inner in _nested(config):
        if keras.saving.get_registered_object(registered_name, custom_objects=custom_objects) is not None:
            continue
        recorded = inner.get(VERSION_KEY)
        written = (f"written by sphere_tf {recorded}" if isinstance(recorded, str)
                   else "recording no sphere_tf version")
        raise UnknownClassError(
            f"{_describe(registered_name, inner)}{'' if what is None else f' in {what}'} ({written}) is of class "
            f"{registered_name!r}, which the installed sphere_tf {version.__version__} does not register: no release "
            "of this one has it, or the subpackage that registers it is not imported yet (sphere_tf.export and "
            "sphere_tf.adversarial register theirs when imported). A file edited by hand or by another program can "
            f"name any class; load one of your own with custom_objects={{{registered_name!r}: YourClass}}.")


def load_model(path, *, safe_mode=True, custom_objects=None, **kwargs):
    """`keras.saving.load_model(path, safe_mode=safe_mode, ...)` after `check_keras_file(path)`.

    A `.keras` file of a newer sphere_tf release fails with its `NewerFileError` alone, wherever its sphere_tf
    objects sit; one naming a class the installed release lacks with `UnknownClassError`. `safe_mode` (Keras's,
    True by default, passed on explicitly) refuses a Python lambda in the file: loading one would run the
    bytecode it carries. Pass `safe_mode=False` only for a file you wrote yourself or trust.
    """
    check_keras_file(path, custom_objects=custom_objects, safe_mode=safe_mode)
    return keras.saving.load_model(path, custom_objects=custom_objects, safe_mode=safe_mode, **kwargs)


def save_model(model, path):
    """`model.save(path)` for a `.keras` file, atomically: written under a temporary `.keras` name beside `path`,
    then renamed over it.

    Keras writes a `.keras` file in place, so a write that fails half-way (a full disk) or a killed process
    leaves a truncated file where the previous complete one was; here `path` holds the previous file or the new
    one, never part of one. A failed write's temporary file is removed.
    """
    path = os.fspath(path)
    directory, name = os.path.split(path)
    if not name.endswith(".keras"):
        raise ValueError(f"Invalid value for argument `path`: expected a path ending in .keras; received {path!r}.")
    temporary = os.path.join(directory, f".{name[:-len('.keras')]}.tmp-{os.getpid()}.keras")
    try:
        model.save(temporary)
        os.replace(temporary, path)
    except BaseException as error:
        try:
            os.remove(temporary)
        except OSError:
            pass
        if isinstance(error, OSError) and error.errno is not None and error.filename is None:
            raise OSError(error.errno, error.strerror, temporary) from error  # a failed write() names no file
        raise
    return path


def _with_version(obj, config):
    """`config` with the version key, when `obj`'s class reads it back: its `from_config` is a wrapper of this
    module (a user's subclass that overrides `from_config` gets the config it always got)."""
    if isinstance(config, dict) and getattr(getattr(type(obj), "from_config", None), _MARK, False):
        return {**config, VERSION_KEY: version.__version__}
    return config


def _checked(cls, config):
    """`config` without the version key (the caller's dict is not changed), after `check_version` of it and of
    every sphere_tf object serialized inside it: those are rebuilt inside the class's constructor, where Keras
    re-raises a layer's errors as `TypeError`, so they are checked here, before."""
    if not isinstance(config, dict):
        return config
    if VERSION_KEY in config:
        config = dict(config)
        recorded = config.pop(VERSION_KEY)
        check_version(recorded, _describe(keras.saving.get_registered_name(cls), config))
    check_config(config)
    for serialized in _lambdas(config):
        # A Python lambda (marshalled bytecode) in a slot the class rebuilds: Keras's deserializer raises its
        # safe-mode `ValueError` here, before the constructor, where Keras's `get` functions would report "Could not
        # interpret ..." and its layers wrap the refusal in a `TypeError`. With safe_mode=False it returns the
        # function and the class rebuilds the slot as before.
        keras.saving.deserialize_keras_object(serialized)
    return config


def _lambdas(value):
    """The serialized Python lambdas (Keras's `{"class_name": "__lambda__", ...}`) anywhere inside a config."""
    return (serialized for _, serialized in _lambda_locations(value, "config"))


def _versioned_get_config(cls):
    own = cls.__dict__.get("get_config")
    inherited = getattr(cls, "get_config", None)
    if getattr(own if own is not None else inherited, _MARK, False):
        return  # wrapped already (here, or by a registered base)
    if own is not None:
        @functools.wraps(own)
        def get_config(self):
            return _with_version(self, own(self))
    else:
        # `super` at call time: Keras injects `Functional` into a functional subclassed model's bases.
        @functools.wraps(inherited)  # copies Keras's `_is_default` mark: its auto-config still applies
        def get_config(self):
            return _with_version(self, super(cls, self).get_config())
        get_config.__qualname__ = f"{cls.__qualname__}.get_config"
    setattr(get_config, _MARK, True)
    cls.get_config = get_config


def _versioned_from_config(cls):
    own = cls.__dict__.get("from_config")
    inherited = getattr(cls, "from_config", None)
    current = own.__func__ if isinstance(own, classmethod) else own if own is not None else inherited
    if getattr(current, _MARK, False):
        return  # wrapped already (here, or by a registered base)
    if own is not None:
        if not isinstance(own, classmethod):
            raise TypeError(f"{cls.__qualname__}.from_config must be a classmethod")
        function = own.__func__

        @functools.wraps(function)
        def from_config(klass, config, *args, **kwargs):
            return function(klass, _checked(klass, config), *args, **kwargs)
    elif inherited is not None:
        def from_config(klass, config, *args, **kwargs):
            return super(cls, klass).from_config(_checked(klass, config), *args, **kwargs)
        from_config.__doc__ = getattr(inherited, "__doc__", None)
    else:
        def from_config(klass, config):
            """Creates the object from its `get_config()`."""
            return klass(**_checked(klass, config))
    from_config.__qualname__ = f"{cls.__qualname__}.from_config"
    setattr(from_config, _MARK, True)
    cls.from_config = classmethod(from_config)


def versioned(cls):
    """Wraps `cls.get_config` / `cls.from_config` to record and check the sphere_tf version (see the module
    docstring); returns `cls`."""
    _versioned_get_config(cls)
    _versioned_from_config(cls)
    return cls


def register_serializable(name=None):
    """Class decorator: `keras.saving.register_keras_serializable(package="sphere_tf", name=name)` for a class
    whose configs record the sphere_tf version (`versioned`)."""

    def decorate(cls):
        return keras.saving.register_keras_serializable(package=PACKAGE, name=name)(versioned(cls))

    return decorate


__all__ = ["MAX_CONFIG_BYTES", "NewerFileError", "PACKAGE", "UnknownClassError", "VERSION_KEY", "check_classes",
           "check_config", "check_keras_file", "check_version",
           "newer_file_error", "register_serializable", "save_model", "versioned"]
