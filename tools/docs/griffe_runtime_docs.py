"""A griffe extension: the docstrings `sphere_tf` composes at import time, read statically.

A few classes build their docstring from shared pieces instead of one literal, which static analysis (griffe,
without importing the package) would otherwise miss or show half-done:

    class OPTDense(OPTLayer):
        __doc__ = \"\"\"Dense layer ...\"\"\" + _OPT_ARGS_DOC + \"\"\"...\"\"\"

    ExportResult = collections.namedtuple(...)
    ExportResult.__doc__ = \"\"\"What `export_model` wrote. ...\"\"\"

    for _cls in (DecoupledConv2D, SphereConv2D):
        _cls.__doc__ = _cls.__doc__.replace("{conv_args}", _CONV_ARGS_DOC)

This extension evaluates those assignments at module level and in class bodies, with the module's string
constants, `+`, f-strings, `str.replace` / `str.format` / `str.strip` and `X.__doc__` (the literal docstring of a
class or function of the module), and sets the resulting docstring, as Python would. An expression it cannot
evaluate leaves the object as it was (`tools/docs/check_docstrings.py` then reports a missing docstring).

It also joins a parameter group whose names wrap onto a second line, a style of the code's Google docstrings:

    Args:
        kernel_initializer, bias_initializer, kernel_regularizer, bias_regularizer,
        kernel_constraint, bias_constraint: as for `keras.layers.Dense`.

becomes one `name, name, ...: description` entry (the parser would otherwise read the first line as a malformed
entry). A group stays one row of the rendered parameter table; `check_docstrings.py` checks that each of its
names is a parameter of the signature (griffe's own check, `warn_unknown_params`, knows no groups and is off).

Used by mkdocstrings (`mkdocs.yml`, `extensions:`) and by `check_docstrings.py`.
"""

import ast
import re

import griffe

_STR_METHODS = {"replace", "format", "strip", "lstrip", "rstrip"}

# Google sections whose entries are `name: description` (griffe's names for them, lower case).
_NAMED_SECTIONS = {"args", "arguments", "params", "parameters", "keyword args", "keyword arguments",
                   "other args", "other arguments", "other params", "other parameters", "attributes"}
# A line holding only names, each followed by a comma: the first line(s) of a wrapped group.
_NAMES_LINE = re.compile(r"(\*{0,2}[A-Za-z_]\w*,\s*)+")


def join_wrapped_groups(text):
    """`text` with each wrapped parameter group of its named sections joined onto one line."""
    lines = text.split("\n")
    out, section_indent, item_indent, i = [], None, None, 0
    while i < len(lines):
        line = lines[i]
        stripped = line.strip()
        indent = len(line) - len(line.lstrip())
        if stripped.endswith(":") and stripped[:-1].strip().lower() in _NAMED_SECTIONS:
            section_indent, item_indent = indent, None
        elif section_indent is not None and stripped:
            if indent <= section_indent:
                section_indent = item_indent = None
            elif item_indent is None:
                item_indent = indent
        if item_indent is not None and indent == item_indent and _NAMES_LINE.fullmatch(stripped):
            merged, j = stripped, i + 1
            while j < len(lines) and len(lines[j]) - len(lines[j].lstrip()) == item_indent:
                merged += " " + lines[j].strip()
                j += 1
                if not _NAMES_LINE.fullmatch(lines[j - 1].strip()):
                    break
            out.append(" " * item_indent + merged)
            i = j
            continue
        out.append(line)
        i += 1
    return "\n".join(out)


class _Unknown(Exception):
    pass


def _evaluate(node, env, raw_docs):
    """The string value of expression `node`, or raises `_Unknown`."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Name) and isinstance(env.get(node.id), str):
        return env[node.id]
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _evaluate(node.left, env, raw_docs) + _evaluate(node.right, env, raw_docs)
    if isinstance(node, ast.JoinedStr):
        parts = []
        for value in node.values:
            if isinstance(value, ast.FormattedValue):
                if value.conversion != -1 or value.format_spec is not None:
                    raise _Unknown
                parts.append(_evaluate(value.value, env, raw_docs))
            else:
                parts.append(_evaluate(value, env, raw_docs))
        return "".join(parts)
    if isinstance(node, ast.Attribute) and node.attr == "__doc__" and isinstance(node.value, ast.Name):
        name = env.get(node.value.id, node.value.id)  # a loop variable stands for the name it is bound to
        if isinstance(name, _Bound) and name.name in raw_docs:
            return raw_docs[name.name]
        if isinstance(name, str) and node.value.id in raw_docs:
            return raw_docs[node.value.id]
        raise _Unknown
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _STR_METHODS):
        receiver = _evaluate(node.func.value, env, raw_docs)
        args = [_evaluate(arg, env, raw_docs) for arg in node.args]
        kwargs = {kw.arg: _evaluate(kw.value, env, raw_docs) for kw in node.keywords if kw.arg is not None}
        if len(kwargs) != len(node.keywords):
            raise _Unknown
        return getattr(receiver, node.func.attr)(*args, **kwargs)
    raise _Unknown


class _Bound:
    """A loop variable bound to the module-level object `name`."""

    def __init__(self, name):
        self.name = name


def _doc_target(target):
    """`X` of an assignment target `X.__doc__`, else None."""
    if isinstance(target, ast.Attribute) and target.attr == "__doc__" and isinstance(target.value, ast.Name):
        return target.value.id
    return None


class RuntimeDocstrings(griffe.Extension):
    """Sets the docstrings a module assigns to `__doc__` and joins wrapped parameter groups (module docstring)."""

    def on_object(self, *, obj, **kwargs):
        """Joins the wrapped parameter groups of a loaded object's docstring."""
        if obj.docstring is not None:
            obj.docstring.value = join_wrapped_groups(obj.docstring.value)

    def on_module(self, *, mod, **kwargs):
        """As `on_object`, for the package's top module (which `on_object` is not called with)."""
        self.on_object(obj=mod)

    def on_module_members(self, *, node, mod, **kwargs):
        """Evaluates the module's `__doc__` assignments once its members are known."""
        if not isinstance(node, ast.Module):
            return
        template = mod.docstring
        env, raw_docs = {}, {}
        for statement in node.body:
            if isinstance(statement, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                doc = ast.get_docstring(statement, clean=False)
                if doc is not None:
                    raw_docs[statement.name] = doc
            if isinstance(statement, ast.ClassDef):
                for inner in statement.body:
                    if (isinstance(inner, ast.Assign) and len(inner.targets) == 1
                            and isinstance(inner.targets[0], ast.Name) and inner.targets[0].id == "__doc__"):
                        self._set(mod, statement.name, inner.value, env, raw_docs, template)
            elif isinstance(statement, ast.Assign) and len(statement.targets) == 1:
                target = statement.targets[0]
                if isinstance(target, ast.Name):
                    try:
                        env[target.id] = _evaluate(statement.value, env, raw_docs)
                    except _Unknown:
                        env.pop(target.id, None)
                elif _doc_target(target) is not None:
                    self._set(mod, _doc_target(target), statement.value, env, raw_docs, template)
            elif (isinstance(statement, ast.For) and isinstance(statement.target, ast.Name)
                  and isinstance(statement.iter, (ast.Tuple, ast.List))
                  and all(isinstance(element, ast.Name) for element in statement.iter.elts)):
                variable = statement.target.id
                for element in statement.iter.elts:
                    loop_env = {**env, variable: _Bound(element.id)}
                    for inner in statement.body:
                        if (isinstance(inner, ast.Assign) and len(inner.targets) == 1
                                and _doc_target(inner.targets[0]) == variable):
                            self._set(mod, element.id, inner.value, loop_env, raw_docs, template)

    @staticmethod
    def _set(mod, name, value_node, env, raw_docs, template):
        member = mod.members.get(name)
        if member is None or member.is_alias:
            return
        try:
            value = _evaluate(value_node, env, raw_docs)
        except (_Unknown, ValueError, KeyError, IndexError):
            return
        raw_docs[name] = value
        member.docstring = griffe.Docstring(
            value,
            lineno=value_node.lineno,
            endlineno=value_node.end_lineno,
            parent=member,
            parser=template.parser if template is not None else None,
            parser_options=template.parser_options if template is not None else None,
        )
