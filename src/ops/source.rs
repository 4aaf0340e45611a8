//! Graph inputs and constants.

use super::{op::outputs_len, Op, OpError, OpResult, Scratch, Tensor, TypedFact};
use crate::op_common;

/// A graph input of a given fact; the runner supplies its value.
#[derive(Debug, Clone)]
pub struct Source {
    pub fact: TypedFact,
}

impl Op for Source {
    op_common!("Source");

    fn output_facts(&self, inputs: &[&TypedFact]) -> OpResult<Vec<TypedFact>> {
        super::checks::input_count(inputs, 0)?;
        Ok(vec![self.fact.clone()])
    }

    fn eval(&self, _: &[&Tensor], _: &mut Vec<Tensor>, _: &mut Scratch) -> OpResult<()> {
        Err(OpError::Other(
            "a Source has no evaluation; the runner feeds it".into(),
        ))
    }

    fn info(&self) -> String {
        self.fact.to_string()
    }
}

/// A constant tensor (weights, filterbanks, windows).
#[derive(Debug, Clone)]
pub struct Const {
    pub value: Tensor,
}

impl Op for Const {
    op_common!("Const");

    fn output_facts(&self, inputs: &[&TypedFact]) -> OpResult<Vec<TypedFact>> {
        super::checks::input_count(inputs, 0)?;
        Ok(vec![TypedFact::of(&self.value)])
    }

    fn eval(&self, inputs: &[&Tensor], outputs: &mut Vec<Tensor>, _: &mut Scratch) -> OpResult<()> {
        super::checks::input_count(inputs, 0)?;
        outputs_len(outputs, 1);
        outputs[0] = self.value.clone();
        Ok(())
    }

    fn info(&self) -> String {
        format!("{}", TypedFact::of(&self.value))
    }
}
