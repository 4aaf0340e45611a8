//! Sizes that are numbers or affine expressions of the streaming symbol `S`.

use std::fmt;

/// A size: `floor((a*S + b) / d) + c`, kept in a canonical form so that two
/// equal expressions compare equal.
///
/// Plain numbers have `a == 0`. Exact and floor divisions by a constant (what
/// strided ops need) keep the expression affine; operations that would leave
/// the family (multiplying a divided expression, adding two divided ones)
/// return `None` rather than an approximation.
///
/// ```
/// use pulsed::ops::Dim;
/// let t = Dim::s().div_floor(160).unwrap();        // STFT frames
/// let t2 = t.div_ceil(2).unwrap();                  // stride-2 conv
/// assert_eq!(t2.eval(16000), 50);
/// assert_eq!(t2, Dim::s().add_const(160).div_floor(320).unwrap());
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Dim {
    a: i64,
    b: i64,
    d: i64,
    c: i64,
}

fn gcd(a: i64, b: i64) -> i64 {
    let (mut a, mut b) = (a.abs(), b.abs());
    while b != 0 {
        let t = a % b;
        a = b;
        b = t;
    }
    a
}

impl Dim {
    /// A plain number.
    pub const fn n(v: i64) -> Dim {
        Dim {
            a: 0,
            b: 0,
            d: 1,
            c: v,
        }
    }

    /// The streaming symbol `S`.
    pub const fn s() -> Dim {
        Dim {
            a: 1,
            b: 0,
            d: 1,
            c: 0,
        }
    }

    /// `a*S + b`.
    pub fn affine(a: i64, b: i64) -> Dim {
        Dim::make(a, b, 1, 0)
    }

    fn make(a: i64, b: i64, d: i64, c: i64) -> Dim {
        debug_assert!(d >= 1);
        if a == 0 {
            return Dim::n(b.div_euclid(d) + c);
        }
        // move whole multiples of d out of b into c
        let (mut a, mut b, mut d, mut c) = (a, b, d, c);
        c += b.div_euclid(d);
        b = b.rem_euclid(d);
        // floor((g a' S + b) / (g d')) = floor((a' S + floor(b / g)) / d'), and
        // with gcd(a', d') = 1 and 0 <= b < d the form is unique.
        let g = gcd(a, d);
        if g > 1 {
            a /= g;
            b = b.div_euclid(g);
            d /= g;
        }
        if a % d == 0 {
            // floor((a S + b)/d) with d | a and 0 <= b < d is (a/d) S
            return Dim {
                a: a / d,
                b: 0,
                d: 1,
                c,
            };
        }
        Dim { a, b, d, c }
    }

    /// `(a, b, d, c)` of `(a*S + b).div_euclid(d) + c`, for evaluating on a device.
    pub fn parts(&self) -> (i64, i64, i64, i64) {
        (self.a, self.b, self.d, self.c)
    }

    /// The value for a concrete stream length.
    pub fn eval(&self, s: i64) -> i64 {
        (self.a * s + self.b).div_euclid(self.d) + self.c
    }

    /// The number, if this does not depend on `S`.
    pub fn as_const(&self) -> Option<i64> {
        (self.a == 0).then_some(self.c)
    }

    /// True if this depends on `S`.
    pub fn is_symbolic(&self) -> bool {
        self.a != 0
    }

    /// True when the expression has no division (`a*S + c`).
    pub fn is_linear(&self) -> bool {
        self.d == 1
    }

    /// Coefficient of `S` when linear.
    pub fn coef(&self) -> Option<i64> {
        self.is_linear().then_some(self.a)
    }

    pub fn add_const(&self, k: i64) -> Dim {
        Dim {
            c: self.c + k,
            ..*self
        }
    }

    /// Sum of two sizes, when it stays in the family.
    pub fn add(&self, other: &Dim) -> Option<Dim> {
        if other.a == 0 {
            Some(self.add_const(other.c))
        } else if self.a == 0 {
            Some(other.add_const(self.c))
        } else if self.d == 1 && other.d == 1 {
            Some(Dim::make(self.a + other.a, 0, 1, self.c + other.c))
        } else if self.d == other.d && self.b == other.b && self.a == other.a {
            // same floor term twice: 2*floor(x) is not floor(2x); refuse
            None
        } else {
            None
        }
    }

    /// Difference of two sizes, when it stays in the family.
    pub fn sub(&self, other: &Dim) -> Option<Dim> {
        if other.a == 0 {
            Some(self.add_const(-other.c))
        } else if self.d == 1 && other.d == 1 {
            Some(Dim::make(self.a - other.a, 0, 1, self.c - other.c))
        } else if self.a == other.a && self.b == other.b && self.d == other.d {
            Some(Dim::n(self.c - other.c))
        } else {
            None
        }
    }

    /// Product with a constant, when it stays in the family.
    pub fn mul(&self, k: i64) -> Option<Dim> {
        if self.a == 0 {
            Some(Dim::n(self.c * k))
        } else if self.d == 1 {
            Some(Dim::make(self.a * k, 0, 1, self.c * k))
        } else {
            None
        }
    }

    /// Product of two sizes: only when one of them is a number.
    pub fn mul_dim(&self, other: &Dim) -> Option<Dim> {
        match (self.as_const(), other.as_const()) {
            (_, Some(k)) => self.mul(k),
            (Some(k), _) => other.mul(k),
            _ => None,
        }
    }

    /// `floor(self / k)` for `k > 0`.
    pub fn div_floor(&self, k: i64) -> Option<Dim> {
        if k <= 0 {
            return None;
        }
        // floor((floor(x/d) + c)/k) = floor((x + c d)/(d k))
        Some(Dim::make(self.a, self.b + self.c * self.d, self.d * k, 0))
    }

    /// `ceil(self / k)` for `k > 0`.
    pub fn div_ceil(&self, k: i64) -> Option<Dim> {
        self.add_const(k - 1).div_floor(k)
    }

    /// Exact division: `None` unless `self` is a multiple of `k` for every `S`
    /// (for linear expressions) or a number divisible by `k`.
    pub fn div_exact(&self, k: i64) -> Option<Dim> {
        if k <= 0 {
            return None;
        }
        if self.d == 1 && self.a % k == 0 && self.c % k == 0 {
            Some(Dim::make(self.a / k, 0, 1, self.c / k))
        } else {
            None
        }
    }
}

impl From<i64> for Dim {
    fn from(v: i64) -> Dim {
        Dim::n(v)
    }
}

impl From<usize> for Dim {
    fn from(v: usize) -> Dim {
        Dim::n(v as i64)
    }
}

impl From<i32> for Dim {
    fn from(v: i32) -> Dim {
        Dim::n(v as i64)
    }
}

impl fmt::Display for Dim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.a == 0 {
            return write!(f, "{}", self.c);
        }
        let lin = |f: &mut fmt::Formatter<'_>, a: i64, b: i64| -> fmt::Result {
            match a {
                1 => write!(f, "S")?,
                -1 => write!(f, "-S")?,
                _ => write!(f, "{a}S")?,
            }
            match b {
                0 => Ok(()),
                b if b > 0 => write!(f, "+{b}"),
                b => write!(f, "{b}"),
            }
        };
        if self.d == 1 {
            lin(f, self.a, self.c)
        } else {
            write!(f, "(")?;
            lin(f, self.a, self.b)?;
            write!(f, ")/{}", self.d)?;
            match self.c {
                0 => Ok(()),
                c if c > 0 => write!(f, "+{c}"),
                c => write!(f, "{c}"),
            }
        }
    }
}

impl fmt::Debug for Dim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn canonical_forms_compare_equal() {
        assert_eq!(Dim::s().mul(2).unwrap().div_floor(2).unwrap(), Dim::s());
        assert_eq!(Dim::affine(4, 6).div_exact(2).unwrap(), Dim::affine(2, 3));
        assert_eq!(
            Dim::s().div_floor(2).unwrap().div_floor(3).unwrap(),
            Dim::s().div_floor(6).unwrap()
        );
        assert_eq!(Dim::s().to_string(), "S");
        assert_eq!(Dim::s().div_ceil(2).unwrap().to_string(), "(S+1)/2");
        assert!(Dim::s().div_floor(2).unwrap().mul(2).is_none());
        assert!(Dim::s().div_exact(2).is_none());
    }

    proptest! {
        #[test]
        fn eval_matches_integer_arithmetic(a in -3i64..4, b in -50i64..50, k in 1i64..9, m in 1i64..5,
                                           c in -20i64..20, s in 0i64..400) {
            let x = Dim::affine(a, b);
            prop_assert_eq!(x.eval(s), a * s + b);
            let fl = x.div_floor(k).unwrap();
            prop_assert_eq!(fl.eval(s), (a * s + b).div_euclid(k));
            let ce = x.div_ceil(k).unwrap();
            prop_assert_eq!(ce.eval(s), (a * s + b + k - 1).div_euclid(k));
            let nested = fl.add_const(c).div_floor(m).unwrap();
            prop_assert_eq!(nested.eval(s), ((a * s + b).div_euclid(k) + c).div_euclid(m));
            prop_assert_eq!(x.mul(m).unwrap().eval(s), (a * s + b) * m);
            let y = Dim::affine(m, c);
            prop_assert_eq!(x.add(&y).unwrap().eval(s), a * s + b + m * s + c);
            prop_assert_eq!(x.sub(&y).unwrap().eval(s), a * s + b - m * s - c);
        }

        #[test]
        fn equal_functions_are_equal_dims(a in 1i64..4, b in -30i64..30, k in 1i64..7, j in 1i64..7) {
            // floor(floor(x/k)/j) == floor(x/(k j)) as expressions
            let x = Dim::affine(a, b);
            prop_assert_eq!(x.div_floor(k).unwrap().div_floor(j).unwrap(), x.div_floor(k * j).unwrap());
        }
    }
}
