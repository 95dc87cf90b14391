"""The IR: element types, shapes and layouts, typed attributes, modules, the opcode table."""
