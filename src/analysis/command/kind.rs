//! What a command does, as far as the analysis cares: its [`Kind`], read
//! from its name alone. Rules and shapes branch on the kind rather than on
//! names, so the spellings a server accepts (`findandmodify`, `isMaster`, …)
//! are folded here once, and sensitive commands are set apart before
//! anything else looks at them.

/// What a command does, as far as analysis cares.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    Find,
    Aggregate,
    Count,
    Distinct,
    Insert,
    Update,
    Delete,
    FindAndModify,
    GetMore,
    KillCursors,
    BulkWrite,
    Explain,
    Create,
    Drop,
    DropDatabase,
    CreateIndexes,
    ListIndexes,
    ShardCollection,
    CustomAction,
    Hello,
    /// Authentication and user management: counted by name, never read.
    Sensitive,
    /// Anything else: passed through and counted by name.
    Other,
}

impl Kind {
    pub fn of(name: &str) -> Kind {
        if crate::analysis::is_sensitive(name) {
            return Kind::Sensitive;
        }
        match name {
            "find" => Kind::Find,
            "aggregate" => Kind::Aggregate,
            "count" => Kind::Count,
            "distinct" => Kind::Distinct,
            "insert" => Kind::Insert,
            "update" => Kind::Update,
            "delete" => Kind::Delete,
            "findAndModify" | "findandmodify" => Kind::FindAndModify,
            "getMore" => Kind::GetMore,
            "killCursors" => Kind::KillCursors,
            "bulkWrite" => Kind::BulkWrite,
            "explain" => Kind::Explain,
            "create" => Kind::Create,
            "drop" => Kind::Drop,
            "dropDatabase" => Kind::DropDatabase,
            "createIndexes" => Kind::CreateIndexes,
            "listIndexes" => Kind::ListIndexes,
            "shardCollection" | "shardcollection" => Kind::ShardCollection,
            "customAction" => Kind::CustomAction,
            "hello" | "isMaster" | "ismaster" => Kind::Hello,
            _ => Kind::Other,
        }
    }

    /// Reads (and read-like commands whose filter selects documents).
    pub fn is_read(self) -> bool {
        matches!(
            self,
            Kind::Find | Kind::Aggregate | Kind::Count | Kind::Distinct
        )
    }

    pub fn is_write(self) -> bool {
        matches!(
            self,
            Kind::Insert | Kind::Update | Kind::Delete | Kind::FindAndModify | Kind::BulkWrite
        )
    }

    /// Whether the command is about the data an application models (as
    /// opposed to handshakes, sessions, admin and cursors housekeeping).
    pub fn is_data(self) -> bool {
        self.is_read() || self.is_write()
    }
}
