//! InfrastructureMachineTemplate → instance-type catalog.
