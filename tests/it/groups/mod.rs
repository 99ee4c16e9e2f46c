//! Consumer groups on one node: assignment, delivery, offsets.

mod consumer_group_delivery;
mod consumer_group_offsets;
mod consumer_groups;
