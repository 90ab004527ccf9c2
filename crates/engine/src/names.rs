//! Enums stored or sent by name — states, statuses, actions, series — made
//! one way: each variant's name is written once, beside the variant, and
//! read both ways from there (and by serde), so a row, a reply and a page
//! cannot disagree on it. A stored name is never changed: read an old one
//! beside the new (as `outbox::Action::from_stored` does).

/// A fieldless enum whose variants each carry their name
/// (`Variant = "name",`): it gets `ALL`, `name()`, `from_name()`, and serde
/// by that name.
macro_rules! named_enum {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident {
            $($(#[$variant_meta:meta])* $variant:ident = $text:literal,)+
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        $vis enum $name {
            $($(#[$variant_meta])* $variant,)+
        }

        impl $name {
            /// Every variant, in the order declared.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// The name it is stored and sent under.
            pub fn name(self) -> &'static str {
                match self {
                    $($name::$variant => $text,)+
                }
            }

            /// The variant `name` names; `None` for a name it does not have.
            pub fn from_name(name: &str) -> Option<$name> {
                $name::ALL.iter().copied().find(|v| v.name() == name)
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(self.name())
            }
        }

        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                let name = String::deserialize(deserializer)?;
                $name::from_name(&name)
                    .ok_or_else(|| serde::de::Error::unknown_variant(&name, &[$($text),+]))
            }
        }
    };
}

pub(crate) use named_enum;

#[cfg(test)]
mod tests {

    named_enum! {
        /// A test's enum.
        pub enum Light {
            Red = "red",
            /// Documented.
            GreenArrow = "green_arrow",
        }
    }

    #[test]
    fn a_name_reads_both_ways_and_through_serde() {
        for light in Light::ALL {
            assert_eq!(Light::from_name(light.name()), Some(*light));
            let json = serde_json::to_string(light).unwrap();
            assert_eq!(json, format!("\"{}\"", light.name()));
            assert_eq!(serde_json::from_str::<Light>(&json).unwrap(), *light);
        }
        assert_eq!(Light::GreenArrow.name(), "green_arrow");
        assert_eq!(Light::from_name("Red"), None);
        assert!(serde_json::from_str::<Light>("\"amber\"").is_err());
    }
}
