//! Kubernetes' DRA CEL environment on the `cel` crate: one variable, `device`, with
//! `driver`, `attributes` and `capacity` (maps by domain, then by id), and the Kubernetes
//! libraries a selector uses: `quantity()` with `compareTo`, `isGreaterThan`,
//! `isLessThan`, `asInteger`, `asApproximateFloat`, `isInteger`, `sign`, `add`, `sub`, and
//! `semver()` with `compareTo`, `isGreaterThan`, `isLessThan`, `major`, `minor`, `patch`,
//! besides CEL's standard library with the strings and lists extensions.
//!
//! Not available (an expression using them cannot be evaluated, and says so): `cel.bind`,
//! the IP, CIDR, URL and format libraries, and `device.allowMultipleAllocations`.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use cel::extractors::This;
use cel::objects::Opaque;
use cel::{Context, Env, ExecutionError, Program, Value};

use super::{Attribute, Device, Quantity};

/// Why a selector cannot be used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SelectorError {
    /// It does not compile, does not give a bool, or calls what the environment lacks: no
    /// device can be judged by it.
    #[error("CEL selector {expression:?} cannot be evaluated: {reason}")]
    Unevaluable { expression: String, reason: String },
    /// It fails on this device (e.g. an attribute the device does not have): the node (or
    /// instance type) cannot allocate the request, as kube-scheduler's allocator aborts.
    #[error("CEL selector {expression:?} fails on device {device}: {reason}")]
    Device {
        expression: String,
        device: String,
        reason: String,
    },
}

/// A compiled selector.
#[derive(Debug)]
pub struct Selector {
    program: Program,
    source: String,
}

/// The environment selectors compile and run in.
pub struct Environment {
    env: Arc<Env>,
}

impl Default for Environment {
    fn default() -> Self {
        Self::new()
    }
}

impl Environment {
    pub fn new() -> Self {
        let mut env = Env::stdlib();
        // Both are declared by the crate itself; neither fails on a fresh stdlib.
        let _ = env.add_extension(cel::extensions::strings);
        let _ = env.add_extension(cel::extensions::lists);
        Environment { env: Arc::new(env) }
    }

    pub fn compile(&self, expression: &str) -> Result<Selector, SelectorError> {
        self.env
            .compile(expression)
            .map(|program| Selector {
                program,
                source: expression.to_string(),
            })
            .map_err(|e| SelectorError::Unevaluable {
                expression: expression.to_string(),
                reason: e.to_string().lines().next().unwrap_or_default().to_string(),
            })
    }

    /// The root context: the Kubernetes functions.
    pub fn context(&self) -> Context<'static, 'static> {
        let mut c = Context::with_env(Arc::clone(&self.env));
        let adds: [Result<(), cel::DeclarationError>; 14] = [
            c.add_function("quantity", quantity_fn),
            c.add_function("isQuantity", |s: Arc<String>| Quantity::parse(&s).is_ok()),
            c.add_function("semver", semver_fn),
            c.add_function("isSemver", |s: Arc<String>| {
                semver::Version::parse(&s).is_ok()
            }),
            c.add_function("compareTo", compare_to),
            c.add_function("isGreaterThan", |this: This<Value>, o: Value| {
                compare_to(this, o).map(|c| c > 0)
            }),
            c.add_function("isLessThan", |this: This<Value>, o: Value| {
                compare_to(this, o).map(|c| c < 0)
            }),
            c.add_function("asInteger", as_integer),
            c.add_function("asApproximateFloat", |This(q): This<Value>| {
                quantity_of(&q, "asApproximateFloat").map(|q| q.as_f64())
            }),
            c.add_function("isInteger", |This(q): This<Value>| {
                quantity_of(&q, "isInteger").map(|q| q.is_integer())
            }),
            c.add_function("sign", |This(q): This<Value>| {
                quantity_of(&q, "sign").map(|q| q.sign())
            }),
            c.add_function("add", |this: This<Value>, o: Value| arith(this, o, "add")),
            c.add_function("sub", |this: This<Value>, o: Value| arith(this, o, "sub")),
            c.add_function("major", |This(v): This<Value>| version_part(&v, 0)),
        ];
        let more = [
            c.add_function("minor", |This(v): This<Value>| version_part(&v, 1)),
            c.add_function("patch", |This(v): This<Value>| version_part(&v, 2)),
        ];
        // Names the standard library does not declare: none of these fails.
        debug_assert!(adds.iter().chain(more.iter()).all(Result::is_ok));
        c
    }

    /// Whether `device` (of `driver`) matches. `domains` are domain names to present as
    /// empty maps when the device has none (Kubernetes gives an unknown domain as empty).
    pub fn matches(
        &self,
        root: &Context<'static, 'static>,
        selector: &Selector,
        device: &Value,
        device_name: &str,
    ) -> Result<bool, SelectorError> {
        self.matches_bound(&self.bind(root, device.clone()), selector, device_name)
    }

    /// A scope of `root` with `device` bound (converted once), to evaluate any number of
    /// selectors on it with [`Self::matches_bound`].
    pub fn bind<'a>(
        &self,
        root: &'a Context<'static, 'static>,
        device: Value,
    ) -> Context<'a, 'static> {
        let mut scope = root.new_inner_scope();
        scope.add_variable_from_value("device", device);
        scope
    }

    /// [`Self::matches`] on the device bound in `scope` ([`Self::bind`]).
    pub fn matches_bound(
        &self,
        scope: &Context<'_, 'static>,
        selector: &Selector,
        device_name: &str,
    ) -> Result<bool, SelectorError> {
        match selector.program.execute(scope) {
            Ok(Value::Bool(b)) => Ok(b),
            Ok(other) => Err(SelectorError::Unevaluable {
                expression: selector.source.clone(),
                reason: format!("gives {:?}, not a bool", other.type_of()),
            }),
            Err(e @ (ExecutionError::NoSuchKey(_) | ExecutionError::ValuesNotComparable(..))) => {
                Err(SelectorError::Device {
                    expression: selector.source.clone(),
                    device: device_name.to_string(),
                    reason: e.to_string(),
                })
            }
            Err(e) => Err(SelectorError::Unevaluable {
                expression: selector.source.clone(),
                reason: e.to_string(),
            }),
        }
    }
}

/// The string literals of an expression: the domains it may look up.
pub fn literals(expression: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut chars = expression.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        if c != '"' && c != '\'' {
            continue;
        }
        let start = i + 1;
        let mut end = None;
        for (j, d) in chars.by_ref() {
            if d == c {
                end = Some(j);
                break;
            }
        }
        if let Some(end) = end {
            out.insert(expression[start..end].to_string());
        }
    }
    out
}

/// `device` as CEL sees it; `domains` absent from the device are empty maps.
pub fn device_value(driver: &str, device: &Device, domains: &BTreeSet<String>) -> Value {
    let mut attrs: HashMap<String, HashMap<String, Value>> = HashMap::new();
    let mut caps: HashMap<String, HashMap<String, Value>> = HashMap::new();
    for d in domains {
        attrs.entry(d.clone()).or_default();
        caps.entry(d.clone()).or_default();
    }
    for (name, a) in &device.attributes {
        let (domain, id) = split(name, driver);
        let v = match a {
            Attribute::Int(i) => Value::Int(*i),
            Attribute::Bool(b) => Value::Bool(*b),
            Attribute::String(s) => Value::from(s.as_str()),
            Attribute::Version(s) => match semver::Version::parse(s) {
                Ok(v) => Value::Opaque(Arc::new(Semver(v))),
                Err(_) => Value::from(s.as_str()),
            },
        };
        attrs.entry(domain).or_default().insert(id, v);
    }
    for (name, q) in &device.capacity {
        let (domain, id) = split(name, driver);
        caps.entry(domain)
            .or_default()
            .insert(id, Value::Opaque(Arc::new(Q(*q))));
    }
    let maps = |m: HashMap<String, HashMap<String, Value>>| -> Value {
        Value::from(
            m.into_iter()
                .map(|(k, v)| (k, Value::from(v)))
                .collect::<HashMap<String, Value>>(),
        )
    };
    let mut dev: HashMap<String, Value> = HashMap::new();
    dev.insert("driver".into(), Value::from(driver));
    dev.insert("attributes".into(), maps(attrs));
    dev.insert("capacity".into(), maps(caps));
    Value::from(dev)
}

fn split(qualified: &str, driver: &str) -> (String, String) {
    match qualified.split_once('/') {
        Some((d, id)) => (d.to_string(), id.to_string()),
        None => (driver.to_string(), qualified.to_string()),
    }
}

#[derive(Debug, PartialEq, Eq)]
struct Q(Quantity);

impl Opaque for Q {
    fn runtime_type_name(&self) -> &str {
        "kubernetes.Quantity"
    }
}

#[derive(Debug, PartialEq, Eq)]
struct Semver(semver::Version);

impl Opaque for Semver {
    fn runtime_type_name(&self) -> &str {
        "kubernetes.Semver"
    }
}

fn quantity_fn(s: Arc<String>) -> Result<Value, ExecutionError> {
    Quantity::parse(&s)
        .map(|q| Value::Opaque(Arc::new(Q(q))))
        .map_err(|e| ExecutionError::function_error("quantity", e))
}

fn semver_fn(s: Arc<String>) -> Result<Value, ExecutionError> {
    semver::Version::parse(&s)
        .map(|v| Value::Opaque(Arc::new(Semver(v))))
        .map_err(|e| ExecutionError::function_error("semver", e))
}

fn quantity_of(v: &Value, function: &str) -> Result<Quantity, ExecutionError> {
    match v {
        Value::Opaque(o) => o.downcast_ref::<Q>().map(|q| q.0),
        Value::Int(i) => Some(Quantity::from_units(*i)),
        _ => None,
    }
    .ok_or_else(|| ExecutionError::function_error(function, "not a quantity"))
}

fn compare_to(This(a): This<Value>, b: Value) -> Result<i64, ExecutionError> {
    if let (Value::Opaque(x), Value::Opaque(y)) = (&a, &b)
        && let (Some(x), Some(y)) = (x.downcast_ref::<Semver>(), y.downcast_ref::<Semver>())
    {
        return Ok(x.0.cmp(&y.0) as i64);
    }
    let (x, y) = (quantity_of(&a, "compareTo")?, quantity_of(&b, "compareTo")?);
    Ok(x.cmp(&y) as i64)
}

fn as_integer(This(q): This<Value>) -> Result<i64, ExecutionError> {
    let q = quantity_of(&q, "asInteger")?;
    if !q.is_integer() {
        return Err(ExecutionError::function_error(
            "asInteger",
            "not an integer",
        ));
    }
    i64::try_from(q.units()).map_err(|_| ExecutionError::function_error("asInteger", "overflow"))
}

fn arith(This(a): This<Value>, b: Value, op: &str) -> Result<Value, ExecutionError> {
    let (x, y) = (quantity_of(&a, op)?, quantity_of(&b, op)?);
    let r = if op == "add" {
        x.checked_add(y)
    } else {
        x.checked_sub(y)
    };
    r.map(|q| Value::Opaque(Arc::new(Q(q))))
        .ok_or_else(|| ExecutionError::function_error(op, "overflow"))
}

fn version_part(v: &Value, part: usize) -> Result<i64, ExecutionError> {
    let Value::Opaque(o) = v else {
        return Err(ExecutionError::function_error("semver", "not a version"));
    };
    let s = o
        .downcast_ref::<Semver>()
        .ok_or_else(|| ExecutionError::function_error("semver", "not a version"))?;
    let n = [s.0.major, s.0.minor, s.0.patch][part];
    i64::try_from(n).map_err(|_| ExecutionError::function_error("semver", "overflow"))
}
