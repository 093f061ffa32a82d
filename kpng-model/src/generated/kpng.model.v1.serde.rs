impl serde::Serialize for Balancing {
    #[allow(deprecated)]
    fn serialize<S>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error>
    where
        S: serde::Serializer,
    {
        let variant = match self {
            Self::Unspecified => "BALANCING_UNSPECIFIED",
            Self::Random => "BALANCING_RANDOM",
            Self::Maglev => "BALANCING_MAGLEV",
            Self::RoundRobin => "BALANCING_ROUND_ROBIN",
        };
        serializer.serialize_str(variant)
    }
}
impl<'de> serde::Deserialize<'de> for Balancing {
    #[allow(deprecated)]
    fn deserialize<D>(deserializer: D) -> std::result::Result<Self, D::Error>
    where
        D: serde::Deserializer<'de>,
    {
        const FIELDS: &[&str] = &[
            "BALANCING_UNSPECIFIED",
            "BALANCING_RANDOM",
            "BALANCING_MAGLEV",
            "BALANCING_ROUND_ROBIN",
        ];

        struct GeneratedVisitor;

        impl serde::de::Visitor<'_> for GeneratedVisitor {
            type Value = Balancing;

            fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(formatter, "expected one of: {:?}", &FIELDS)
            }

            fn visit_i64<E>(self, v: i64) -> std::result::Result<Self::Value, E>
            where
                E: serde::de::Error,
            {
                i32::try_from(v)
                    .ok()
                    .and_then(|x| x.try_into().ok())
                    .ok_or_else(|| {
                        serde::de::Error::invalid_value(serde::de::Unexpected::Signed(v), &self)
                    })
            }

            fn visit_u64<E>(self, v: u64) -> std::result::Result<Self::Value, E>
            where
                E: serde::de::Error,
            {
                i32::try_from(v)
                    .ok()
                    .and_then(|x| x.try_into().ok())
                    .ok_or_else(|| {
                        serde::de::Error::invalid_value(serde::de::Unexpected::Unsigned(v), &self)
                    })
            }

            fn visit_str<E>(self, value: &str) -> std::result::Result<Self::Value, E>
            where
                E: serde::de::Error,
            {
                match value {
                    "BALANCING_UNSPECIFIED" => Ok(Balancing::Unspecified),
                    "BALANCING_RANDOM" => Ok(Balancing::Random),
                    "BALANCING_MAGLEV" => Ok(Balancing::Maglev),
                    "BALANCING_ROUND_ROBIN" => Ok(Balancing::RoundRobin),
                    _ => Err(serde::de::Error::unknown_variant(value, FIELDS)),
                }
            }
        }
        deserializer.deserialize_any(GeneratedVisitor)
    }
}
impl serde::Serialize for ClientIpAffinity {
    #[allow(deprecated)]
    fn serialize<S>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error>
    where
        S: serde::Serializer,
    {
        use serde::ser::SerializeStruct;
        let mut len = 0;
        if self.timeout_seconds != 0 {
            len += 1;
        }
        let mut struct_ser = serializer.serialize_struct("kpng.model.v1.ClientIpAffinity", len)?;
        if self.timeout_seconds != 0 {
            struct_ser.serialize_field("timeoutSeconds", &self.timeout_seconds)?;
        }
        struct_ser.end()
    }
}
impl<'de> serde::Deserialize<'de> for ClientIpAffinity {
    #[allow(deprecated)]
    fn deserialize<D>(deserializer: D) -> std::result::Result<Self, D::Error>
    where
        D: serde::Deserializer<'de>,
    {
        const FIELDS: &[&str] = &[
            "timeout_seconds",
            "timeoutSeconds",
        ];

        #[allow(clippy::enum_variant_names)]
        enum GeneratedField {
            TimeoutSeconds,
        }
        impl<'de> serde::Deserialize<'de> for GeneratedField {
            fn deserialize<D>(deserializer: D) -> std::result::Result<GeneratedField, D::Error>
            where
                D: serde::Deserializer<'de>,
            {
                struct GeneratedVisitor;

                impl serde::de::Visitor<'_> for GeneratedVisitor {
                    type Value = GeneratedField;

                    fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                        write!(formatter, "expected one of: {:?}", &FIELDS)
                    }

                    #[allow(unused_variables)]
                    fn visit_str<E>(self, value: &str) -> std::result::Result<GeneratedField, E>
                    where
                        E: serde::de::Error,
                    {
                        match value {
                            "timeoutSeconds" | "timeout_seconds" => Ok(GeneratedField::TimeoutSeconds),
                            _ => Err(serde::de::Error::unknown_field(value, FIELDS)),
                        }
                    }
                }
                deserializer.deserialize_identifier(GeneratedVisitor)
            }
        }
        struct GeneratedVisitor;
        impl<'de> serde::de::Visitor<'de> for GeneratedVisitor {
            type Value = ClientIpAffinity;

            fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                formatter.write_str("struct kpng.model.v1.ClientIpAffinity")
            }

            fn visit_map<V>(self, mut map_: V) -> std::result::Result<ClientIpAffinity, V::Error>
                where
                    V: serde::de::MapAccess<'de>,
            {
                let mut timeout_seconds__ = None;
                while let Some(k) = map_.next_key()? {
                    match k {
                        GeneratedField::TimeoutSeconds => {
                            if timeout_seconds__.is_some() {
                                return Err(serde::de::Error::duplicate_field("timeoutSeconds"));
                            }
                            timeout_seconds__ = 
                                Some(map_.next_value::<::pbjson::private::NumberDeserialize<_>>()?.0)
                            ;
                        }
                    }
                }
                Ok(ClientIpAffinity {
                    timeout_seconds: timeout_seconds__.unwrap_or_default(),
                })
            }
        }
        deserializer.deserialize_struct("kpng.model.v1.ClientIpAffinity", FIELDS, GeneratedVisitor)
    }
}
impl serde::Serialize for CompactEndpoint {
    #[allow(deprecated)]
    fn serialize<S>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error>
    where
        S: serde::Serializer,
    {
        use serde::ser::SerializeStruct;
        let mut len = 0;
        if !self.ip.is_empty() {
            len += 1;
        }
        if self.flags != 0 {
            len += 1;
        }
        if self.node != 0 {
            len += 1;
        }
        if self.zone != 0 {
            len += 1;
        }
        if self.ports != 0 {
            len += 1;
        }
        if !self.hint_zones.is_empty() {
            len += 1;
        }
        if !self.hint_nodes.is_empty() {
            len += 1;
        }
        if !self.other_address.is_empty() {
            len += 1;
        }
        let mut struct_ser = serializer.serialize_struct("kpng.model.v1.CompactEndpoint", len)?;
        if !self.ip.is_empty() {
            #[allow(clippy::needless_borrow)]
            #[allow(clippy::needless_borrows_for_generic_args)]
            struct_ser.serialize_field("ip", pbjson::private::base64::encode(&self.ip).as_str())?;
        }
        if self.flags != 0 {
            struct_ser.serialize_field("flags", &self.flags)?;
        }
        if self.node != 0 {
            struct_ser.serialize_field("node", &self.node)?;
        }
        if self.zone != 0 {
            struct_ser.serialize_field("zone", &self.zone)?;
        }
        if self.ports != 0 {
            struct_ser.serialize_field("ports", &self.ports)?;
        }
        if !self.hint_zones.is_empty() {
            struct_ser.serialize_field("hintZones", &self.hint_zones)?;
        }
        if !self.hint_nodes.is_empty() {
            struct_ser.serialize_field("hintNodes", &self.hint_nodes)?;
        }
        if !self.other_address.is_empty() {
            #[allow(clippy::needless_borrow)]
            #[allow(clippy::needless_borrows_for_generic_args)]
            struct_ser.serialize_field("otherAddress", pbjson::private::base64::encode(&self.other_address).as_str())?;
        }
        struct_ser.end()
    }
}
impl<'de> serde::Deserialize<'de> for CompactEndpoint {
    #[allow(deprecated)]
    fn deserialize<D>(deserializer: D) -> std::result::Result<Self, D::Error>
    where
        D: serde::Deserializer<'de>,
    {
        const FIELDS: &[&str] = &[
            "ip",
            "flags",
            "node",
            "zone",
            "ports",
            "hint_zones",
            "hintZones",
            "hint_nodes",
            "hintNodes",
            "other_address",
            "otherAddress",
        ];

        #[allow(clippy::enum_variant_names)]
        enum GeneratedField {
            Ip,
            Flags,
            Node,
            Zone,
            Ports,
            HintZones,
            HintNodes,
            OtherAddress,
        }
        impl<'de> serde::Deserialize<'de> for GeneratedField {
            fn deserialize<D>(deserializer: D) -> std::result::Result<GeneratedField, D::Error>
            where
                D: serde::Deserializer<'de>,
            {
                struct GeneratedVisitor;

                impl serde::de::Visitor<'_> for GeneratedVisitor {
                    type Value = GeneratedField;

                    fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                        write!(formatter, "expected one of: {:?}", &FIELDS)
                    }

                    #[allow(unused_variables)]
                    fn visit_str<E>(self, value: &str) -> std::result::Result<GeneratedField, E>
                    where
                        E: serde::de::Error,
                    {
                        match value {
                            "ip" => Ok(GeneratedField::Ip),
                            "flags" => Ok(GeneratedField::Flags),
                            "node" => Ok(GeneratedField::Node),
                            "zone" => Ok(GeneratedField::Zone),
                            "ports" => Ok(GeneratedField::Ports),
                            "hintZones" | "hint_zones" => Ok(GeneratedField::HintZones),
                            "hintNodes" | "hint_nodes" => Ok(GeneratedField::HintNodes),
                            "otherAddress" | "other_address" => Ok(GeneratedField::OtherAddress),
                            _ => Err(serde::de::Error::unknown_field(value, FIELDS)),
                        }
                    }
                }
                deserializer.deserialize_identifier(GeneratedVisitor)
            }
        }
        struct GeneratedVisitor;
        impl<'de> serde::de::Visitor<'de> for GeneratedVisitor {
            type Value = CompactEndpoint;

            fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                formatter.write_str("struct kpng.model.v1.CompactEndpoint")
            }

            fn visit_map<V>(self, mut map_: V) -> std::result::Result<CompactEndpoint, V::Error>
                where
                    V: serde::de::MapAccess<'de>,
            {
                let mut ip__ = None;
                let mut flags__ = None;
                let mut node__ = None;
                let mut zone__ = None;
                let mut ports__ = None;
                let mut hint_zones__ = None;
                let mut hint_nodes__ = None;
                let mut other_address__ = None;
                while let Some(k) = map_.next_key()? {
                    match k {
                        GeneratedField::Ip => {
                            if ip__.is_some() {
                                return Err(serde::de::Error::duplicate_field("ip"));
                            }
                            ip__ = 
                                Some(map_.next_value::<::pbjson::private::BytesDeserialize<_>>()?.0)
                            ;
                        }
                        GeneratedField::Flags => {
                            if flags__.is_some() {
                                return Err(serde::de::Error::duplicate_field("flags"));
                            }
                            flags__ = 
                                Some(map_.next_value::<::pbjson::private::NumberDeserialize<_>>()?.0)
                            ;
                        }
                        GeneratedField::Node => {
                            if node__.is_some() {
                                return Err(serde::de::Error::duplicate_field("node"));
                            }
                            node__ = 
                                Some(map_.next_value::<::pbjson::private::NumberDeserialize<_>>()?.0)
                            ;
                        }
                        GeneratedField::Zone => {
                            if zone__.is_some() {
                                return Err(serde::de::Error::duplicate_field("zone"));
                            }
                            zone__ = 
                                Some(map_.next_value::<::pbjson::private::NumberDeserialize<_>>()?.0)
                            ;
                        }
                        GeneratedField::Ports => {
                            if ports__.is_some() {
                                return Err(serde::de::Error::duplicate_field("ports"));
                            }
                            ports__ = 
                                Some(map_.next_value::<::pbjson::private::NumberDeserialize<_>>()?.0)
                            ;
                        }
                        GeneratedField::HintZones => {
                            if hint_zones__.is_some() {
                                return Err(serde::de::Error::duplicate_field("hintZones"));
                            }
                            hint_zones__ = 
                                Some(map_.next_value::<Vec<::pbjson::private::NumberDeserialize<_>>>()?
                                    .into_iter().map(|x| x.0).collect())
                            ;
                        }
                        GeneratedField::HintNodes => {
                            if hint_nodes__.is_some() {
                                return Err(serde::de::Error::duplicate_field("hintNodes"));
                            }
                            hint_nodes__ = 
                                Some(map_.next_value::<Vec<::pbjson::private::NumberDeserialize<_>>>()?
                                    .into_iter().map(|x| x.0).collect())
                            ;
                        }
                        GeneratedField::OtherAddress => {
                            if other_address__.is_some() {
                                return Err(serde::de::Error::duplicate_field("otherAddress"));
                            }
                            other_address__ = 
                                Some(map_.next_value::<::pbjson::private::BytesDeserialize<_>>()?.0)
                            ;
                        }
                    }
                }
                Ok(CompactEndpoint {
                    ip: ip__.unwrap_or_default(),
                    flags: flags__.unwrap_or_default(),
                    node: node__.unwrap_or_default(),
                    zone: zone__.unwrap_or_default(),
                    ports: ports__.unwrap_or_default(),
                    hint_zones: hint_zones__.unwrap_or_default(),
                    hint_nodes: hint_nodes__.unwrap_or_default(),
                    other_address: other_address__.unwrap_or_default(),
                })
            }
        }
        deserializer.deserialize_struct("kpng.model.v1.CompactEndpoint", FIELDS, GeneratedVisitor)
    }
}
impl serde::Serialize for DeleteEndpoint {
    #[allow(deprecated)]
    fn serialize<S>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error>
    where
        S: serde::Serializer,
    {
        use serde::ser::SerializeStruct;
        let mut len = 0;
        if self.service.is_some() {
            len += 1;
        }
        if !self.ip.is_empty() {
            len += 1;
        }
        let mut struct_ser = serializer.serialize_struct("kpng.model.v1.DeleteEndpoint", len)?;
        if let Some(v) = self.service.as_ref() {
            struct_ser.serialize_field("service", v)?;
        }
        if !self.ip.is_empty() {
            struct_ser.serialize_field("ip", &self.ip)?;
        }
        struct_ser.end()
    }
}
impl<'de> serde::Deserialize<'de> for DeleteEndpoint {
    #[allow(deprecated)]
    fn deserialize<D>(deserializer: D) -> std::result::Result<Self, D::Error>
    where
        D: serde::Deserializer<'de>,
    {
        const FIELDS: &[&str] = &[
            "service",
            "ip",
        ];

        #[allow(clippy::enum_variant_names)]
        enum GeneratedField {
            Service,
            Ip,
        }
        impl<'de> serde::Deserialize<'de> for GeneratedField {
            fn deserialize<D>(deserializer: D) -> std::result::Result<GeneratedField, D::Error>
            where
                D: serde::Deserializer<'de>,
            {
                struct GeneratedVisitor;

                impl serde::de::Visitor<'_> for GeneratedVisitor {
                    type Value = GeneratedField;

                    fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                        write!(formatter, "expected one of: {:?}", &FIELDS)
                    }

                    #[allow(unused_variables)]
                    fn visit_str<E>(self, value: &str) -> std::result::Result<GeneratedField, E>
                    where
                        E: serde::de::Error,
                    {
                        match value {
                            "service" => Ok(GeneratedField::Service),
                            "ip" => Ok(GeneratedField::Ip),
                            _ => Err(serde::de::Error::unknown_field(value, FIELDS)),
                        }
                    }
                }
                deserializer.deserialize_identifier(GeneratedVisitor)
            }
        }
        struct GeneratedVisitor;
        impl<'de> serde::de::Visitor<'de> for GeneratedVisitor {
            type Value = DeleteEndpoint;

            fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                formatter.write_str("struct kpng.model.v1.DeleteEndpoint")
            }

            fn visit_map<V>(self, mut map_: V) -> std::result::Result<DeleteEndpoint, V::Error>
                where
                    V: serde::de::MapAccess<'de>,
            {
                let mut service__ = None;
                let mut ip__ = None;
                while let Some(k) = map_.next_key()? {
                    match k {
                        GeneratedField::Service => {
                            if service__.is_some() {
                                return Err(serde::de::Error::duplicate_field("service"));
                            }
                            service__ = map_.next_value()?;
                        }
                        GeneratedField::Ip => {
                            if ip__.is_some() {
                                return Err(serde::de::Error::duplicate_field("ip"));
                            }
                            ip__ = Some(map_.next_value()?);
                        }
                    }
                }
                Ok(DeleteEndpoint {
                    service: service__,
                    ip: ip__.unwrap_or_default(),
                })
            }
        }
        deserializer.deserialize_struct("kpng.model.v1.DeleteEndpoint", FIELDS, GeneratedVisitor)
    }
}
impl serde::Serialize for DroppedServices {
    #[allow(deprecated)]
    fn serialize<S>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error>
    where
        S: serde::Serializer,
    {
        use serde::ser::SerializeStruct;
        let mut len = 0;
        if !self.services.is_empty() {
            len += 1;
        }
        let mut struct_ser = serializer.serialize_struct("kpng.model.v1.DroppedServices", len)?;
        if !self.services.is_empty() {
            struct_ser.serialize_field("services", &self.services.iter().map(ToString::to_string).collect::<Vec<_>>())?;
        }
        struct_ser.end()
    }
}
impl<'de> serde::Deserialize<'de> for DroppedServices {
    #[allow(deprecated)]
    fn deserialize<D>(deserializer: D) -> std::result::Result<Self, D::Error>
    where
        D: serde::Deserializer<'de>,
    {
        const FIELDS: &[&str] = &[
            "services",
        ];

        #[allow(clippy::enum_variant_names)]
        enum GeneratedField {
            Services,
        }
        impl<'de> serde::Deserialize<'de> for GeneratedField {
            fn deserialize<D>(deserializer: D) -> std::result::Result<GeneratedField, D::Error>
            where
                D: serde::Deserializer<'de>,
            {
                struct GeneratedVisitor;

                impl serde::de::Visitor<'_> for GeneratedVisitor {
                    type Value = GeneratedField;

                    fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                        write!(formatter, "expected one of: {:?}", &FIELDS)
                    }

                    #[allow(unused_variables)]
                    fn visit_str<E>(self, value: &str) -> std::result::Result<GeneratedField, E>
                    where
                        E: serde::de::Error,
                    {
                        match value {
                            "services" => Ok(GeneratedField::Services),
                            _ => Err(serde::de::Error::unknown_field(value, FIELDS)),
                        }
                    }
                }
                deserializer.deserialize_identifier(GeneratedVisitor)
            }
        }
        struct GeneratedVisitor;
        impl<'de> serde::de::Visitor<'de> for GeneratedVisitor {
            type Value = DroppedServices;

            fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                formatter.write_str("struct kpng.model.v1.DroppedServices")
            }

            fn visit_map<V>(self, mut map_: V) -> std::result::Result<DroppedServices, V::Error>
                where
                    V: serde::de::MapAccess<'de>,
            {
                let mut services__ = None;
                while let Some(k) = map_.next_key()? {
                    match k {
                        GeneratedField::Services => {
                            if services__.is_some() {
                                return Err(serde::de::Error::duplicate_field("services"));
                            }
                            services__ = 
                                Some(map_.next_value::<Vec<::pbjson::private::NumberDeserialize<_>>>()?
                                    .into_iter().map(|x| x.0).collect())
                            ;
                        }
                    }
                }
                Ok(DroppedServices {
                    services: services__.unwrap_or_default(),
                })
            }
        }
        deserializer.deserialize_struct("kpng.model.v1.DroppedServices", FIELDS, GeneratedVisitor)
    }
}
impl serde::Serialize for Endpoint {
    #[allow(deprecated)]
    fn serialize<S>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error>
    where
        S: serde::Serializer,
    {
        use serde::ser::SerializeStruct;
        let mut len = 0;
        if self.addresses.is_some() {
            len += 1;
        }
        if !self.node_name.is_empty() {
            len += 1;
        }
        if !self.zone.is_empty() {
            len += 1;
        }
        if !self.hint_zones.is_empty() {
            len += 1;
        }
        if !self.hint_nodes.is_empty() {
            len += 1;
        }
        if self.ready {
            len += 1;
        }
        if self.serving {
            len += 1;
        }
        if self.terminating {
            len += 1;
        }
        if !self.ports.is_empty() {
            len += 1;
        }
        if !self.copies.is_empty() {
            len += 1;
        }
        let mut struct_ser = serializer.serialize_struct("kpng.model.v1.Endpoint", len)?;
        if let Some(v) = self.addresses.as_ref() {
            struct_ser.serialize_field("addresses", v)?;
        }
        if !self.node_name.is_empty() {
            struct_ser.serialize_field("nodeName", &self.node_name)?;
        }
        if !self.zone.is_empty() {
            struct_ser.serialize_field("zone", &self.zone)?;
        }
        if !self.hint_zones.is_empty() {
            struct_ser.serialize_field("hintZones", &self.hint_zones)?;
        }
        if !self.hint_nodes.is_empty() {
            struct_ser.serialize_field("hintNodes", &self.hint_nodes)?;
        }
        if self.ready {
            struct_ser.serialize_field("ready", &self.ready)?;
        }
        if self.serving {
            struct_ser.serialize_field("serving", &self.serving)?;
        }
        if self.terminating {
            struct_ser.serialize_field("terminating", &self.terminating)?;
        }
        if !self.ports.is_empty() {
            struct_ser.serialize_field("ports", &self.ports)?;
        }
        if !self.copies.is_empty() {
            struct_ser.serialize_field("copies", &self.copies)?;
        }
        struct_ser.end()
    }
}
impl<'de> serde::Deserialize<'de> for Endpoint {
    #[allow(deprecated)]
    fn deserialize<D>(deserializer: D) -> std::result::Result<Self, D::Error>
    where
        D: serde::Deserializer<'de>,
    {
        const FIELDS: &[&str] = &[
            "addresses",
            "node_name",
            "nodeName",
            "zone",
            "hint_zones",
            "hintZones",
            "hint_nodes",
            "hintNodes",
            "ready",
            "serving",
            "terminating",
            "ports",
            "copies",
        ];

        #[allow(clippy::enum_variant_names)]
        enum GeneratedField {
            Addresses,
            NodeName,
            Zone,
            HintZones,
            HintNodes,
            Ready,
            Serving,
            Terminating,
            Ports,
            Copies,
        }
        impl<'de> serde::Deserialize<'de> for GeneratedField {
            fn deserialize<D>(deserializer: D) -> std::result::Result<GeneratedField, D::Error>
            where
                D: serde::Deserializer<'de>,
            {
                struct GeneratedVisitor;

                impl serde::de::Visitor<'_> for GeneratedVisitor {
                    type Value = GeneratedField;

                    fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                        write!(formatter, "expected one of: {:?}", &FIELDS)
                    }

                    #[allow(unused_variables)]
                    fn visit_str<E>(self, value: &str) -> std::result::Result<GeneratedField, E>
                    where
                        E: serde::de::Error,
                    {
                        match value {
                            "addresses" => Ok(GeneratedField::Addresses),
                            "nodeName" | "node_name" => Ok(GeneratedField::NodeName),
                            "zone" => Ok(GeneratedField::Zone),
                            "hintZones" | "hint_zones" => Ok(GeneratedField::HintZones),
                            "hintNodes" | "hint_nodes" => Ok(GeneratedField::HintNodes),
                            "ready" => Ok(GeneratedField::Ready),
                            "serving" => Ok(GeneratedField::Serving),
                            "terminating" => Ok(GeneratedField::Terminating),
                            "ports" => Ok(GeneratedField::Ports),
                            "copies" => Ok(GeneratedField::Copies),
                            _ => Err(serde::de::Error::unknown_field(value, FIELDS)),
                        }
                    }
                }
                deserializer.deserialize_identifier(GeneratedVisitor)
            }
        }
        struct GeneratedVisitor;
        impl<'de> serde::de::Visitor<'de> for GeneratedVisitor {
            type Value = Endpoint;

            fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                formatter.write_str("struct kpng.model.v1.Endpoint")
            }

            fn visit_map<V>(self, mut map_: V) -> std::result::Result<Endpoint, V::Error>
                where
                    V: serde::de::MapAccess<'de>,
            {
                let mut addresses__ = None;
                let mut node_name__ = None;
                let mut zone__ = None;
                let mut hint_zones__ = None;
                let mut hint_nodes__ = None;
                let mut ready__ = None;
                let mut serving__ = None;
                let mut terminating__ = None;
                let mut ports__ = None;
                let mut copies__ = None;
                while let Some(k) = map_.next_key()? {
                    match k {
                        GeneratedField::Addresses => {
                            if addresses__.is_some() {
                                return Err(serde::de::Error::duplicate_field("addresses"));
                            }
                            addresses__ = map_.next_value()?;
                        }
                        GeneratedField::NodeName => {
                            if node_name__.is_some() {
                                return Err(serde::de::Error::duplicate_field("nodeName"));
                            }
                            node_name__ = Some(map_.next_value()?);
                        }
                        GeneratedField::Zone => {
                            if zone__.is_some() {
                                return Err(serde::de::Error::duplicate_field("zone"));
                            }
                            zone__ = Some(map_.next_value()?);
                        }
                        GeneratedField::HintZones => {
                            if hint_zones__.is_some() {
                                return Err(serde::de::Error::duplicate_field("hintZones"));
                            }
                            hint_zones__ = Some(map_.next_value()?);
                        }
                        GeneratedField::HintNodes => {
                            if hint_nodes__.is_some() {
                                return Err(serde::de::Error::duplicate_field("hintNodes"));
                            }
                            hint_nodes__ = Some(map_.next_value()?);
                        }
                        GeneratedField::Ready => {
                            if ready__.is_some() {
                                return Err(serde::de::Error::duplicate_field("ready"));
                            }
                            ready__ = Some(map_.next_value()?);
                        }
                        GeneratedField::Serving => {
                            if serving__.is_some() {
                                return Err(serde::de::Error::duplicate_field("serving"));
                            }
                            serving__ = Some(map_.next_value()?);
                        }
                        GeneratedField::Terminating => {
                            if terminating__.is_some() {
                                return Err(serde::de::Error::duplicate_field("terminating"));
                            }
                            terminating__ = Some(map_.next_value()?);
                        }
                        GeneratedField::Ports => {
                            if ports__.is_some() {
                                return Err(serde::de::Error::duplicate_field("ports"));
                            }
                            ports__ = Some(map_.next_value()?);
                        }
                        GeneratedField::Copies => {
                            if copies__.is_some() {
                                return Err(serde::de::Error::duplicate_field("copies"));
                            }
                            copies__ = Some(map_.next_value()?);
                        }
                    }
                }
                Ok(Endpoint {
                    addresses: addresses__,
                    node_name: node_name__.unwrap_or_default(),
                    zone: zone__.unwrap_or_default(),
                    hint_zones: hint_zones__.unwrap_or_default(),
                    hint_nodes: hint_nodes__.unwrap_or_default(),
                    ready: ready__.unwrap_or_default(),
                    serving: serving__.unwrap_or_default(),
                    terminating: terminating__.unwrap_or_default(),
                    ports: ports__.unwrap_or_default(),
                    copies: copies__.unwrap_or_default(),
                })
            }
        }
        deserializer.deserialize_struct("kpng.model.v1.Endpoint", FIELDS, GeneratedVisitor)
    }
}
impl serde::Serialize for EndpointColumns {
    #[allow(deprecated)]
    fn serialize<S>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error>
    where
        S: serde::Serializer,
    {
        use serde::ser::SerializeStruct;
        let mut len = 0;
        if !self.flags.is_empty() {
            len += 1;
        }
        if !self.ips.is_empty() {
            len += 1;
        }
        if !self.places.is_empty() {
            len += 1;
        }
        if !self.other_ips.is_empty() {
            len += 1;
        }
        if !self.hint_counts.is_empty() {
            len += 1;
        }
        if !self.hints.is_empty() {
            len += 1;
        }
        let mut struct_ser = serializer.serialize_struct("kpng.model.v1.EndpointColumns", len)?;
        if !self.flags.is_empty() {
            #[allow(clippy::needless_borrow)]
            #[allow(clippy::needless_borrows_for_generic_args)]
            struct_ser.serialize_field("flags", pbjson::private::base64::encode(&self.flags).as_str())?;
        }
        if !self.ips.is_empty() {
            #[allow(clippy::needless_borrow)]
            #[allow(clippy::needless_borrows_for_generic_args)]
            struct_ser.serialize_field("ips", pbjson::private::base64::encode(&self.ips).as_str())?;
        }
        if !self.places.is_empty() {
            struct_ser.serialize_field("places", &self.places)?;
        }
        if !self.other_ips.is_empty() {
            #[allow(clippy::needless_borrow)]
            #[allow(clippy::needless_borrows_for_generic_args)]
            struct_ser.serialize_field("otherIps", pbjson::private::base64::encode(&self.other_ips).as_str())?;
        }
        if !self.hint_counts.is_empty() {
            struct_ser.serialize_field("hintCounts", &self.hint_counts)?;
        }
        if !self.hints.is_empty() {
            struct_ser.serialize_field("hints", &self.hints)?;
        }
        struct_ser.end()
    }
}
impl<'de> serde::Deserialize<'de> for EndpointColumns {
    #[allow(deprecated)]
    fn deserialize<D>(deserializer: D) -> std::result::Result<Self, D::Error>
    where
        D: serde::Deserializer<'de>,
    {
        const FIELDS: &[&str] = &[
            "flags",
            "ips",
            "places",
            "other_ips",
            "otherIps",
            "hint_counts",
            "hintCounts",
            "hints",
        ];

        #[allow(clippy::enum_variant_names)]
        enum GeneratedField {
            Flags,
            Ips,
            Places,
            OtherIps,
            HintCounts,
            Hints,
        }
        impl<'de> serde::Deserialize<'de> for GeneratedField {
            fn deserialize<D>(deserializer: D) -> std::result::Result<GeneratedField, D::Error>
            where
                D: serde::Deserializer<'de>,
            {
                struct GeneratedVisitor;

                impl serde::de::Visitor<'_> for GeneratedVisitor {
                    type Value = GeneratedField;

                    fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                        write!(formatter, "expected one of: {:?}", &FIELDS)
                    }

                    #[allow(unused_variables)]
                    fn visit_str<E>(self, value: &str) -> std::result::Result<GeneratedField, E>
                    where
                        E: serde::de::Error,
                    {
                        match value {
                            "flags" => Ok(GeneratedField::Flags),
                            "ips" => Ok(GeneratedField::Ips),
                            "places" => Ok(GeneratedField::Places),
                            "otherIps" | "other_ips" => Ok(GeneratedField::OtherIps),
                            "hintCounts" | "hint_counts" => Ok(GeneratedField::HintCounts),
                            "hints" => Ok(GeneratedField::Hints),
                            _ => Err(serde::de::Error::unknown_field(value, FIELDS)),
                        }
                    }
                }
                deserializer.deserialize_identifier(GeneratedVisitor)
            }
        }
        struct GeneratedVisitor;
        impl<'de> serde::de::Visitor<'de> for GeneratedVisitor {
            type Value = EndpointColumns;

            fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                formatter.write_str("struct kpng.model.v1.EndpointColumns")
            }

            fn visit_map<V>(self, mut map_: V) -> std::result::Result<EndpointColumns, V::Error>
                where
                    V: serde::de::MapAccess<'de>,
            {
                let mut flags__ = None;
                let mut ips__ = None;
                let mut places__ = None;
                let mut other_ips__ = None;
                let mut hint_counts__ = None;
                let mut hints__ = None;
                while let Some(k) = map_.next_key()? {
                    match k {
                        GeneratedField::Flags => {
                            if flags__.is_some() {
                                return Err(serde::de::Error::duplicate_field("flags"));
                            }
                            flags__ = 
                                Some(map_.next_value::<::pbjson::private::BytesDeserialize<_>>()?.0)
                            ;
                        }
                        GeneratedField::Ips => {
                            if ips__.is_some() {
                                return Err(serde::de::Error::duplicate_field("ips"));
                            }
                            ips__ = 
                                Some(map_.next_value::<::pbjson::private::BytesDeserialize<_>>()?.0)
                            ;
                        }
                        GeneratedField::Places => {
                            if places__.is_some() {
                                return Err(serde::de::Error::duplicate_field("places"));
                            }
                            places__ = 
                                Some(map_.next_value::<Vec<::pbjson::private::NumberDeserialize<_>>>()?
                                    .into_iter().map(|x| x.0).collect())
                            ;
                        }
                        GeneratedField::OtherIps => {
                            if other_ips__.is_some() {
                                return Err(serde::de::Error::duplicate_field("otherIps"));
                            }
                            other_ips__ = 
                                Some(map_.next_value::<::pbjson::private::BytesDeserialize<_>>()?.0)
                            ;
                        }
                        GeneratedField::HintCounts => {
                            if hint_counts__.is_some() {
                                return Err(serde::de::Error::duplicate_field("hintCounts"));
                            }
                            hint_counts__ = 
                                Some(map_.next_value::<Vec<::pbjson::private::NumberDeserialize<_>>>()?
                                    .into_iter().map(|x| x.0).collect())
                            ;
                        }
                        GeneratedField::Hints => {
                            if hints__.is_some() {
                                return Err(serde::de::Error::duplicate_field("hints"));
                            }
                            hints__ = 
                                Some(map_.next_value::<Vec<::pbjson::private::NumberDeserialize<_>>>()?
                                    .into_iter().map(|x| x.0).collect())
                            ;
                        }
                    }
                }
                Ok(EndpointColumns {
                    flags: flags__.unwrap_or_default(),
                    ips: ips__.unwrap_or_default(),
                    places: places__.unwrap_or_default(),
                    other_ips: other_ips__.unwrap_or_default(),
                    hint_counts: hint_counts__.unwrap_or_default(),
                    hints: hints__.unwrap_or_default(),
                })
            }
        }
        deserializer.deserialize_struct("kpng.model.v1.EndpointColumns", FIELDS, GeneratedVisitor)
    }
}
impl serde::Serialize for EndpointEntry {
    #[allow(deprecated)]
    fn serialize<S>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error>
    where
        S: serde::Serializer,
    {
        use serde::ser::SerializeStruct;
        let mut len = 0;
        if self.key.is_some() {
            len += 1;
        }
        if self.endpoint.is_some() {
            len += 1;
        }
        let mut struct_ser = serializer.serialize_struct("kpng.model.v1.EndpointEntry", len)?;
        if let Some(v) = self.key.as_ref() {
            struct_ser.serialize_field("key", v)?;
        }
        if let Some(v) = self.endpoint.as_ref() {
            struct_ser.serialize_field("endpoint", v)?;
        }
        struct_ser.end()
    }
}
impl<'de> serde::Deserialize<'de> for EndpointEntry {
    #[allow(deprecated)]
    fn deserialize<D>(deserializer: D) -> std::result::Result<Self, D::Error>
    where
        D: serde::Deserializer<'de>,
    {
        const FIELDS: &[&str] = &[
            "key",
            "endpoint",
        ];

        #[allow(clippy::enum_variant_names)]
        enum GeneratedField {
            Key,
            Endpoint,
        }
        impl<'de> serde::Deserialize<'de> for GeneratedField {
            fn deserialize<D>(deserializer: D) -> std::result::Result<GeneratedField, D::Error>
            where
                D: serde::Deserializer<'de>,
            {
                struct GeneratedVisitor;

                impl serde::de::Visitor<'_> for GeneratedVisitor {
                    type Value = GeneratedField;

                    fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                        write!(formatter, "expected one of: {:?}", &FIELDS)
                    }

                    #[allow(unused_variables)]
                    fn visit_str<E>(self, value: &str) -> std::result::Result<GeneratedField, E>
                    where
                        E: serde::de::Error,
                    {
                        match value {
                            "key" => Ok(GeneratedField::Key),
                            "endpoint" => Ok(GeneratedField::Endpoint),
                            _ => Err(serde::de::Error::unknown_field(value, FIELDS)),
                        }
                    }
                }
                deserializer.deserialize_identifier(GeneratedVisitor)
            }
        }
        struct GeneratedVisitor;
        impl<'de> serde::de::Visitor<'de> for GeneratedVisitor {
            type Value = EndpointEntry;

            fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                formatter.write_str("struct kpng.model.v1.EndpointEntry")
            }

            fn visit_map<V>(self, mut map_: V) -> std::result::Result<EndpointEntry, V::Error>
                where
                    V: serde::de::MapAccess<'de>,
            {
                let mut key__ = None;
                let mut endpoint__ = None;
                while let Some(k) = map_.next_key()? {
                    match k {
                        GeneratedField::Key => {
                            if key__.is_some() {
                                return Err(serde::de::Error::duplicate_field("key"));
                            }
                            key__ = map_.next_value()?;
                        }
                        GeneratedField::Endpoint => {
                            if endpoint__.is_some() {
                                return Err(serde::de::Error::duplicate_field("endpoint"));
                            }
                            endpoint__ = map_.next_value()?;
                        }
                    }
                }
                Ok(EndpointEntry {
                    key: key__,
                    endpoint: endpoint__,
                })
            }
        }
        deserializer.deserialize_struct("kpng.model.v1.EndpointEntry", FIELDS, GeneratedVisitor)
    }
}
impl serde::Serialize for EndpointKey {
    #[allow(deprecated)]
    fn serialize<S>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error>
    where
        S: serde::Serializer,
    {
        use serde::ser::SerializeStruct;
        let mut len = 0;
        if self.service.is_some() {
            len += 1;
        }
        if !self.ip.is_empty() {
            len += 1;
        }
        let mut struct_ser = serializer.serialize_struct("kpng.model.v1.EndpointKey", len)?;
        if let Some(v) = self.service.as_ref() {
            struct_ser.serialize_field("service", v)?;
        }
        if !self.ip.is_empty() {
            struct_ser.serialize_field("ip", &self.ip)?;
        }
        struct_ser.end()
    }
}
impl<'de> serde::Deserialize<'de> for EndpointKey {
    #[allow(deprecated)]
    fn deserialize<D>(deserializer: D) -> std::result::Result<Self, D::Error>
    where
        D: serde::Deserializer<'de>,
    {
        const FIELDS: &[&str] = &[
            "service",
            "ip",
        ];

        #[allow(clippy::enum_variant_names)]
        enum GeneratedField {
            Service,
            Ip,
        }
        impl<'de> serde::Deserialize<'de> for GeneratedField {
            fn deserialize<D>(deserializer: D) -> std::result::Result<GeneratedField, D::Error>
            where
                D: serde::Deserializer<'de>,
            {
                struct GeneratedVisitor;

                impl serde::de::Visitor<'_> for GeneratedVisitor {
                    type Value = GeneratedField;

                    fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                        write!(formatter, "expected one of: {:?}", &FIELDS)
                    }

                    #[allow(unused_variables)]
                    fn visit_str<E>(self, value: &str) -> std::result::Result<GeneratedField, E>
                    where
                        E: serde::de::Error,
                    {
                        match value {
                            "service" => Ok(GeneratedField::Service),
                            "ip" => Ok(GeneratedField::Ip),
                            _ => Err(serde::de::Error::unknown_field(value, FIELDS)),
                        }
                    }
                }
                deserializer.deserialize_identifier(GeneratedVisitor)
            }
        }
        struct GeneratedVisitor;
        impl<'de> serde::de::Visitor<'de> for GeneratedVisitor {
            type Value = EndpointKey;

            fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                formatter.write_str("struct kpng.model.v1.EndpointKey")
            }

            fn visit_map<V>(self, mut map_: V) -> std::result::Result<EndpointKey, V::Error>
                where
                    V: serde::de::MapAccess<'de>,
            {
                let mut service__ = None;
                let mut ip__ = None;
                while let Some(k) = map_.next_key()? {
                    match k {
                        GeneratedField::Service => {
                            if service__.is_some() {
                                return Err(serde::de::Error::duplicate_field("service"));
                            }
                            service__ = map_.next_value()?;
                        }
                        GeneratedField::Ip => {
                            if ip__.is_some() {
                                return Err(serde::de::Error::duplicate_field("ip"));
                            }
                            ip__ = Some(map_.next_value()?);
                        }
                    }
                }
                Ok(EndpointKey {
                    service: service__,
                    ip: ip__.unwrap_or_default(),
                })
            }
        }
        deserializer.deserialize_struct("kpng.model.v1.EndpointKey", FIELDS, GeneratedVisitor)
    }
}
impl serde::Serialize for EndpointPort {
    #[allow(deprecated)]
    fn serialize<S>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error>
    where
        S: serde::Serializer,
    {
        use serde::ser::SerializeStruct;
        let mut len = 0;
        if !self.name.is_empty() {
            len += 1;
        }
        if self.protocol != 0 {
            len += 1;
        }
        if self.port != 0 {
            len += 1;
        }
        let mut struct_ser = serializer.serialize_struct("kpng.model.v1.EndpointPort", len)?;
        if !self.name.is_empty() {
            struct_ser.serialize_field("name", &self.name)?;
        }
        if self.protocol != 0 {
            let v = Protocol::try_from(self.protocol)
                .map_err(|_| serde::ser::Error::custom(format!("Invalid variant {}", self.protocol)))?;
            struct_ser.serialize_field("protocol", &v)?;
        }
        if self.port != 0 {
            struct_ser.serialize_field("port", &self.port)?;
        }
        struct_ser.end()
    }
}
impl<'de> serde::Deserialize<'de> for EndpointPort {
    #[allow(deprecated)]
    fn deserialize<D>(deserializer: D) -> std::result::Result<Self, D::Error>
    where
        D: serde::Deserializer<'de>,
    {
        const FIELDS: &[&str] = &[
            "name",
            "protocol",
            "port",
        ];

        #[allow(clippy::enum_variant_names)]
        enum GeneratedField {
            Name,
            Protocol,
            Port,
        }
        impl<'de> serde::Deserialize<'de> for GeneratedField {
            fn deserialize<D>(deserializer: D) -> std::result::Result<GeneratedField, D::Error>
            where
                D: serde::Deserializer<'de>,
            {
                struct GeneratedVisitor;

                impl serde::de::Visitor<'_> for GeneratedVisitor {
                    type Value = GeneratedField;

                    fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                        write!(formatter, "expected one of: {:?}", &FIELDS)
                    }

                    #[allow(unused_variables)]
                    fn visit_str<E>(self, value: &str) -> std::result::Result<GeneratedField, E>
                    where
                        E: serde::de::Error,
                    {
                        match value {
                            "name" => Ok(GeneratedField::Name),
                            "protocol" => Ok(GeneratedField::Protocol),
                            "port" => Ok(GeneratedField::Port),
                            _ => Err(serde::de::Error::unknown_field(value, FIELDS)),
                        }
                    }
                }
                deserializer.deserialize_identifier(GeneratedVisitor)
            }
        }
        struct GeneratedVisitor;
        impl<'de> serde::de::Visitor<'de> for GeneratedVisitor {
            type Value = EndpointPort;

            fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                formatter.write_str("struct kpng.model.v1.EndpointPort")
            }

            fn visit_map<V>(self, mut map_: V) -> std::result::Result<EndpointPort, V::Error>
                where
                    V: serde::de::MapAccess<'de>,
            {
                let mut name__ = None;
                let mut protocol__ = None;
                let mut port__ = None;
                while let Some(k) = map_.next_key()? {
                    match k {
                        GeneratedField::Name => {
                            if name__.is_some() {
                                return Err(serde::de::Error::duplicate_field("name"));
                            }
                            name__ = Some(map_.next_value()?);
                        }
                        GeneratedField::Protocol => {
                            if protocol__.is_some() {
                                return Err(serde::de::Error::duplicate_field("protocol"));
                            }
                            protocol__ = Some(map_.next_value::<Protocol>()? as i32);
                        }
                        GeneratedField::Port => {
                            if port__.is_some() {
                                return Err(serde::de::Error::duplicate_field("port"));
                            }
                            port__ = 
                                Some(map_.next_value::<::pbjson::private::NumberDeserialize<_>>()?.0)
                            ;
                        }
                    }
                }
                Ok(EndpointPort {
                    name: name__.unwrap_or_default(),
                    protocol: protocol__.unwrap_or_default(),
                    port: port__.unwrap_or_default(),
                })
            }
        }
        deserializer.deserialize_struct("kpng.model.v1.EndpointPort", FIELDS, GeneratedVisitor)
    }
}
impl serde::Serialize for EndpointRef {
    #[allow(deprecated)]
    fn serialize<S>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error>
    where
        S: serde::Serializer,
    {
        use serde::ser::SerializeStruct;
        let mut len = 0;
        if !self.ip.is_empty() {
            len += 1;
        }
        if self.endpoint.is_some() {
            len += 1;
        }
        if self.is_local {
            len += 1;
        }
        if self.cluster {
            len += 1;
        }
        if self.local {
            len += 1;
        }
        let mut struct_ser = serializer.serialize_struct("kpng.model.v1.EndpointRef", len)?;
        if !self.ip.is_empty() {
            struct_ser.serialize_field("ip", &self.ip)?;
        }
        if let Some(v) = self.endpoint.as_ref() {
            struct_ser.serialize_field("endpoint", v)?;
        }
        if self.is_local {
            struct_ser.serialize_field("isLocal", &self.is_local)?;
        }
        if self.cluster {
            struct_ser.serialize_field("cluster", &self.cluster)?;
        }
        if self.local {
            struct_ser.serialize_field("local", &self.local)?;
        }
        struct_ser.end()
    }
}
impl<'de> serde::Deserialize<'de> for EndpointRef {
    #[allow(deprecated)]
    fn deserialize<D>(deserializer: D) -> std::result::Result<Self, D::Error>
    where
        D: serde::Deserializer<'de>,
    {
        const FIELDS: &[&str] = &[
            "ip",
            "endpoint",
            "is_local",
            "isLocal",
            "cluster",
            "local",
        ];

        #[allow(clippy::enum_variant_names)]
        enum GeneratedField {
            Ip,
            Endpoint,
            IsLocal,
            Cluster,
            Local,
        }
        impl<'de> serde::Deserialize<'de> for GeneratedField {
            fn deserialize<D>(deserializer: D) -> std::result::Result<GeneratedField, D::Error>
            where
                D: serde::Deserializer<'de>,
            {
                struct GeneratedVisitor;

                impl serde::de::Visitor<'_> for GeneratedVisitor {
                    type Value = GeneratedField;

                    fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                        write!(formatter, "expected one of: {:?}", &FIELDS)
                    }

                    #[allow(unused_variables)]
                    fn visit_str<E>(self, value: &str) -> std::result::Result<GeneratedField, E>
                    where
                        E: serde::de::Error,
                    {
                        match value {
                            "ip" => Ok(GeneratedField::Ip),
                            "endpoint" => Ok(GeneratedField::Endpoint),
                            "isLocal" | "is_local" => Ok(GeneratedField::IsLocal),
                            "cluster" => Ok(GeneratedField::Cluster),
                            "local" => Ok(GeneratedField::Local),
                            _ => Err(serde::de::Error::unknown_field(value, FIELDS)),
                        }
                    }
                }
                deserializer.deserialize_identifier(GeneratedVisitor)
            }
        }
        struct GeneratedVisitor;
        impl<'de> serde::de::Visitor<'de> for GeneratedVisitor {
            type Value = EndpointRef;

            fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                formatter.write_str("struct kpng.model.v1.EndpointRef")
            }

            fn visit_map<V>(self, mut map_: V) -> std::result::Result<EndpointRef, V::Error>
                where
                    V: serde::de::MapAccess<'de>,
            {
                let mut ip__ = None;
                let mut endpoint__ = None;
                let mut is_local__ = None;
                let mut cluster__ = None;
                let mut local__ = None;
                while let Some(k) = map_.next_key()? {
                    match k {
                        GeneratedField::Ip => {
                            if ip__.is_some() {
                                return Err(serde::de::Error::duplicate_field("ip"));
                            }
                            ip__ = Some(map_.next_value()?);
                        }
                        GeneratedField::Endpoint => {
                            if endpoint__.is_some() {
                                return Err(serde::de::Error::duplicate_field("endpoint"));
                            }
                            endpoint__ = map_.next_value()?;
                        }
                        GeneratedField::IsLocal => {
                            if is_local__.is_some() {
                                return Err(serde::de::Error::duplicate_field("isLocal"));
                            }
                            is_local__ = Some(map_.next_value()?);
                        }
                        GeneratedField::Cluster => {
                            if cluster__.is_some() {
                                return Err(serde::de::Error::duplicate_field("cluster"));
                            }
                            cluster__ = Some(map_.next_value()?);
                        }
                        GeneratedField::Local => {
                            if local__.is_some() {
                                return Err(serde::de::Error::duplicate_field("local"));
                            }
                            local__ = Some(map_.next_value()?);
                        }
                    }
                }
                Ok(EndpointRef {
                    ip: ip__.unwrap_or_default(),
                    endpoint: endpoint__,
                    is_local: is_local__.unwrap_or_default(),
                    cluster: cluster__.unwrap_or_default(),
                    local: local__.unwrap_or_default(),
                })
            }
        }
        deserializer.deserialize_struct("kpng.model.v1.EndpointRef", FIELDS, GeneratedVisitor)
    }
}
impl serde::Serialize for EnlsChange {
    #[allow(deprecated)]
    fn serialize<S>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error>
    where
        S: serde::Serializer,
    {
        use serde::ser::SerializeStruct;
        let mut len = 0;
        if self.change.is_some() {
            len += 1;
        }
        let mut struct_ser = serializer.serialize_struct("kpng.model.v1.EnlsChange", len)?;
        if let Some(v) = self.change.as_ref() {
            match v {
                enls_change::Change::SetService(v) => {
                    struct_ser.serialize_field("setService", v)?;
                }
                enls_change::Change::DeleteService(v) => {
                    struct_ser.serialize_field("deleteService", v)?;
                }
                enls_change::Change::SetEndpoint(v) => {
                    struct_ser.serialize_field("setEndpoint", v)?;
                }
                enls_change::Change::DeleteEndpoint(v) => {
                    struct_ser.serialize_field("deleteEndpoint", v)?;
                }
                enls_change::Change::SetNode(v) => {
                    struct_ser.serialize_field("setNode", v)?;
                }
                enls_change::Change::DeleteNode(v) => {
                    struct_ser.serialize_field("deleteNode", v)?;
                }
                enls_change::Change::SetServiceCidr(v) => {
                    struct_ser.serialize_field("setServiceCidr", v)?;
                }
                enls_change::Change::DeleteServiceCidr(v) => {
                    struct_ser.serialize_field("deleteServiceCidr", v)?;
                }
            }
        }
        struct_ser.end()
    }
}
impl<'de> serde::Deserialize<'de> for EnlsChange {
    #[allow(deprecated)]
    fn deserialize<D>(deserializer: D) -> std::result::Result<Self, D::Error>
    where
        D: serde::Deserializer<'de>,
    {
        const FIELDS: &[&str] = &[
            "set_service",
            "setService",
            "delete_service",
            "deleteService",
            "set_endpoint",
            "setEndpoint",
            "delete_endpoint",
            "deleteEndpoint",
            "set_node",
            "setNode",
            "delete_node",
            "deleteNode",
            "set_service_cidr",
            "setServiceCidr",
            "delete_service_cidr",
            "deleteServiceCidr",
        ];

        #[allow(clippy::enum_variant_names)]
        enum GeneratedField {
            SetService,
            DeleteService,
            SetEndpoint,
            DeleteEndpoint,
            SetNode,
            DeleteNode,
            SetServiceCidr,
            DeleteServiceCidr,
        }
        impl<'de> serde::Deserialize<'de> for GeneratedField {
            fn deserialize<D>(deserializer: D) -> std::result::Result<GeneratedField, D::Error>
            where
                D: serde::Deserializer<'de>,
            {
                struct GeneratedVisitor;

                impl serde::de::Visitor<'_> for GeneratedVisitor {
                    type Value = GeneratedField;

                    fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                        write!(formatter, "expected one of: {:?}", &FIELDS)
                    }

                    #[allow(unused_variables)]
                    fn visit_str<E>(self, value: &str) -> std::result::Result<GeneratedField, E>
                    where
                        E: serde::de::Error,
                    {
                        match value {
                            "setService" | "set_service" => Ok(GeneratedField::SetService),
                            "deleteService" | "delete_service" => Ok(GeneratedField::DeleteService),
                            "setEndpoint" | "set_endpoint" => Ok(GeneratedField::SetEndpoint),
                            "deleteEndpoint" | "delete_endpoint" => Ok(GeneratedField::DeleteEndpoint),
                            "setNode" | "set_node" => Ok(GeneratedField::SetNode),
                            "deleteNode" | "delete_node" => Ok(GeneratedField::DeleteNode),
                            "setServiceCidr" | "set_service_cidr" => Ok(GeneratedField::SetServiceCidr),
                            "deleteServiceCidr" | "delete_service_cidr" => Ok(GeneratedField::DeleteServiceCidr),
                            _ => Err(serde::de::Error::unknown_field(value, FIELDS)),
                        }
                    }
                }
                deserializer.deserialize_identifier(GeneratedVisitor)
            }
        }
        struct GeneratedVisitor;
        impl<'de> serde::de::Visitor<'de> for GeneratedVisitor {
            type Value = EnlsChange;

            fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                formatter.write_str("struct kpng.model.v1.EnlsChange")
            }

            fn visit_map<V>(self, mut map_: V) -> std::result::Result<EnlsChange, V::Error>
                where
                    V: serde::de::MapAccess<'de>,
            {
                let mut change__ = None;
                while let Some(k) = map_.next_key()? {
                    match k {
                        GeneratedField::SetService => {
                            if change__.is_some() {
                                return Err(serde::de::Error::duplicate_field("setService"));
                            }
                            change__ = map_.next_value::<::std::option::Option<_>>()?.map(enls_change::Change::SetService)
;
                        }
                        GeneratedField::DeleteService => {
                            if change__.is_some() {
                                return Err(serde::de::Error::duplicate_field("deleteService"));
                            }
                            change__ = map_.next_value::<::std::option::Option<_>>()?.map(enls_change::Change::DeleteService)
;
                        }
                        GeneratedField::SetEndpoint => {
                            if change__.is_some() {
                                return Err(serde::de::Error::duplicate_field("setEndpoint"));
                            }
                            change__ = map_.next_value::<::std::option::Option<_>>()?.map(enls_change::Change::SetEndpoint)
;
                        }
                        GeneratedField::DeleteEndpoint => {
                            if change__.is_some() {
                                return Err(serde::de::Error::duplicate_field("deleteEndpoint"));
                            }
                            change__ = map_.next_value::<::std::option::Option<_>>()?.map(enls_change::Change::DeleteEndpoint)
;
                        }
                        GeneratedField::SetNode => {
                            if change__.is_some() {
                                return Err(serde::de::Error::duplicate_field("setNode"));
                            }
                            change__ = map_.next_value::<::std::option::Option<_>>()?.map(enls_change::Change::SetNode)
;
                        }
                        GeneratedField::DeleteNode => {
                            if change__.is_some() {
                                return Err(serde::de::Error::duplicate_field("deleteNode"));
                            }
                            change__ = map_.next_value::<::std::option::Option<_>>()?.map(enls_change::Change::DeleteNode);
                        }
                        GeneratedField::SetServiceCidr => {
                            if change__.is_some() {
                                return Err(serde::de::Error::duplicate_field("setServiceCidr"));
                            }
                            change__ = map_.next_value::<::std::option::Option<_>>()?.map(enls_change::Change::SetServiceCidr)
;
                        }
                        GeneratedField::DeleteServiceCidr => {
                            if change__.is_some() {
                                return Err(serde::de::Error::duplicate_field("deleteServiceCidr"));
                            }
                            change__ = map_.next_value::<::std::option::Option<_>>()?.map(enls_change::Change::DeleteServiceCidr);
                        }
                    }
                }
                Ok(EnlsChange {
                    change: change__,
                })
            }
        }
        deserializer.deserialize_struct("kpng.model.v1.EnlsChange", FIELDS, GeneratedVisitor)
    }
}
impl serde::Serialize for EnlsChanges {
    #[allow(deprecated)]
    fn serialize<S>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error>
    where
        S: serde::Serializer,
    {
        use serde::ser::SerializeStruct;
        let mut len = 0;
        if !self.changes.is_empty() {
            len += 1;
        }
        let mut struct_ser = serializer.serialize_struct("kpng.model.v1.EnlsChanges", len)?;
        if !self.changes.is_empty() {
            struct_ser.serialize_field("changes", &self.changes)?;
        }
        struct_ser.end()
    }
}
impl<'de> serde::Deserialize<'de> for EnlsChanges {
    #[allow(deprecated)]
    fn deserialize<D>(deserializer: D) -> std::result::Result<Self, D::Error>
    where
        D: serde::Deserializer<'de>,
    {
        const FIELDS: &[&str] = &[
            "changes",
        ];

        #[allow(clippy::enum_variant_names)]
        enum GeneratedField {
            Changes,
        }
        impl<'de> serde::Deserialize<'de> for GeneratedField {
            fn deserialize<D>(deserializer: D) -> std::result::Result<GeneratedField, D::Error>
            where
                D: serde::Deserializer<'de>,
            {
                struct GeneratedVisitor;

                impl serde::de::Visitor<'_> for GeneratedVisitor {
                    type Value = GeneratedField;

                    fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                        write!(formatter, "expected one of: {:?}", &FIELDS)
                    }

                    #[allow(unused_variables)]
                    fn visit_str<E>(self, value: &str) -> std::result::Result<GeneratedField, E>
                    where
                        E: serde::de::Error,
                    {
                        match value {
                            "changes" => Ok(GeneratedField::Changes),
                            _ => Err(serde::de::Error::unknown_field(value, FIELDS)),
                        }
                    }
                }
                deserializer.deserialize_identifier(GeneratedVisitor)
            }
        }
        struct GeneratedVisitor;
        impl<'de> serde::de::Visitor<'de> for GeneratedVisitor {
            type Value = EnlsChanges;

            fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                formatter.write_str("struct kpng.model.v1.EnlsChanges")
            }

            fn visit_map<V>(self, mut map_: V) -> std::result::Result<EnlsChanges, V::Error>
                where
                    V: serde::de::MapAccess<'de>,
            {
                let mut changes__ = None;
                while let Some(k) = map_.next_key()? {
                    match k {
                        GeneratedField::Changes => {
                            if changes__.is_some() {
                                return Err(serde::de::Error::duplicate_field("changes"));
                            }
                            changes__ = Some(map_.next_value()?);
                        }
                    }
                }
                Ok(EnlsChanges {
                    changes: changes__.unwrap_or_default(),
                })
            }
        }
        deserializer.deserialize_struct("kpng.model.v1.EnlsChanges", FIELDS, GeneratedVisitor)
    }
}
impl serde::Serialize for FleetNode {
    #[allow(deprecated)]
    fn serialize<S>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error>
    where
        S: serde::Serializer,
    {
        use serde::ser::SerializeStruct;
        let mut len = 0;
        if !self.node.is_empty() {
            len += 1;
        }
        if self.sent_revision != 0 {
            len += 1;
        }
        if self.applied_revision != 0 {
            len += 1;
        }
        if self.revisions_behind != 0 {
            len += 1;
        }
        if self.seconds_behind != 0. {
            len += 1;
        }
        if !self.error.is_empty() {
            len += 1;
        }
        if self.streams != 0 {
            len += 1;
        }
        if self.reporting {
            len += 1;
        }
        if self.last_latency_seconds != 0. {
            len += 1;
        }
        let mut struct_ser = serializer.serialize_struct("kpng.model.v1.FleetNode", len)?;
        if !self.node.is_empty() {
            struct_ser.serialize_field("node", &self.node)?;
        }
        if self.sent_revision != 0 {
            #[allow(clippy::needless_borrow)]
            #[allow(clippy::needless_borrows_for_generic_args)]
            struct_ser.serialize_field("sentRevision", ToString::to_string(&self.sent_revision).as_str())?;
        }
        if self.applied_revision != 0 {
            #[allow(clippy::needless_borrow)]
            #[allow(clippy::needless_borrows_for_generic_args)]
            struct_ser.serialize_field("appliedRevision", ToString::to_string(&self.applied_revision).as_str())?;
        }
        if self.revisions_behind != 0 {
            #[allow(clippy::needless_borrow)]
            #[allow(clippy::needless_borrows_for_generic_args)]
            struct_ser.serialize_field("revisionsBehind", ToString::to_string(&self.revisions_behind).as_str())?;
        }
        if self.seconds_behind != 0. {
            struct_ser.serialize_field("secondsBehind", &self.seconds_behind)?;
        }
        if !self.error.is_empty() {
            struct_ser.serialize_field("error", &self.error)?;
        }
        if self.streams != 0 {
            struct_ser.serialize_field("streams", &self.streams)?;
        }
        if self.reporting {
            struct_ser.serialize_field("reporting", &self.reporting)?;
        }
        if self.last_latency_seconds != 0. {
            struct_ser.serialize_field("lastLatencySeconds", &self.last_latency_seconds)?;
        }
        struct_ser.end()
    }
}
impl<'de> serde::Deserialize<'de> for FleetNode {
    #[allow(deprecated)]
    fn deserialize<D>(deserializer: D) -> std::result::Result<Self, D::Error>
    where
        D: serde::Deserializer<'de>,
    {
        const FIELDS: &[&str] = &[
            "node",
            "sent_revision",
            "sentRevision",
            "applied_revision",
            "appliedRevision",
            "revisions_behind",
            "revisionsBehind",
            "seconds_behind",
            "secondsBehind",
            "error",
            "streams",
            "reporting",
            "last_latency_seconds",
            "lastLatencySeconds",
        ];

        #[allow(clippy::enum_variant_names)]
        enum GeneratedField {
            Node,
            SentRevision,
            AppliedRevision,
            RevisionsBehind,
            SecondsBehind,
            Error,
            Streams,
            Reporting,
            LastLatencySeconds,
        }
        impl<'de> serde::Deserialize<'de> for GeneratedField {
            fn deserialize<D>(deserializer: D) -> std::result::Result<GeneratedField, D::Error>
            where
                D: serde::Deserializer<'de>,
            {
                struct GeneratedVisitor;

                impl serde::de::Visitor<'_> for GeneratedVisitor {
                    type Value = GeneratedField;

                    fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                        write!(formatter, "expected one of: {:?}", &FIELDS)
                    }

                    #[allow(unused_variables)]
                    fn visit_str<E>(self, value: &str) -> std::result::Result<GeneratedField, E>
                    where
                        E: serde::de::Error,
                    {
                        match value {
                            "node" => Ok(GeneratedField::Node),
                            "sentRevision" | "sent_revision" => Ok(GeneratedField::SentRevision),
                            "appliedRevision" | "applied_revision" => Ok(GeneratedField::AppliedRevision),
                            "revisionsBehind" | "revisions_behind" => Ok(GeneratedField::RevisionsBehind),
                            "secondsBehind" | "seconds_behind" => Ok(GeneratedField::SecondsBehind),
                            "error" => Ok(GeneratedField::Error),
                            "streams" => Ok(GeneratedField::Streams),
                            "reporting" => Ok(GeneratedField::Reporting),
                            "lastLatencySeconds" | "last_latency_seconds" => Ok(GeneratedField::LastLatencySeconds),
                            _ => Err(serde::de::Error::unknown_field(value, FIELDS)),
                        }
                    }
                }
                deserializer.deserialize_identifier(GeneratedVisitor)
            }
        }
        struct GeneratedVisitor;
        impl<'de> serde::de::Visitor<'de> for GeneratedVisitor {
            type Value = FleetNode;

            fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                formatter.write_str("struct kpng.model.v1.FleetNode")
            }

            fn visit_map<V>(self, mut map_: V) -> std::result::Result<FleetNode, V::Error>
                where
                    V: serde::de::MapAccess<'de>,
            {
                let mut node__ = None;
                let mut sent_revision__ = None;
                let mut applied_revision__ = None;
                let mut revisions_behind__ = None;
                let mut seconds_behind__ = None;
                let mut error__ = None;
                let mut streams__ = None;
                let mut reporting__ = None;
                let mut last_latency_seconds__ = None;
                while let Some(k) = map_.next_key()? {
                    match k {
                        GeneratedField::Node => {
                            if node__.is_some() {
                                return Err(serde::de::Error::duplicate_field("node"));
                            }
                            node__ = Some(map_.next_value()?);
                        }
                        GeneratedField::SentRevision => {
                            if sent_revision__.is_some() {
                                return Err(serde::de::Error::duplicate_field("sentRevision"));
                            }
                            sent_revision__ = 
                                Some(map_.next_value::<::pbjson::private::NumberDeserialize<_>>()?.0)
                            ;
                        }
                        GeneratedField::AppliedRevision => {
                            if applied_revision__.is_some() {
                                return Err(serde::de::Error::duplicate_field("appliedRevision"));
                            }
                            applied_revision__ = 
                                Some(map_.next_value::<::pbjson::private::NumberDeserialize<_>>()?.0)
                            ;
                        }
                        GeneratedField::RevisionsBehind => {
                            if revisions_behind__.is_some() {
                                return Err(serde::de::Error::duplicate_field("revisionsBehind"));
                            }
                            revisions_behind__ = 
                                Some(map_.next_value::<::pbjson::private::NumberDeserialize<_>>()?.0)
                            ;
                        }
                        GeneratedField::SecondsBehind => {
                            if seconds_behind__.is_some() {
                                return Err(serde::de::Error::duplicate_field("secondsBehind"));
                            }
                            seconds_behind__ = 
                                Some(map_.next_value::<::pbjson::private::NumberDeserialize<_>>()?.0)
                            ;
                        }
                        GeneratedField::Error => {
                            if error__.is_some() {
                                return Err(serde::de::Error::duplicate_field("error"));
                            }
                            error__ = Some(map_.next_value()?);
                        }
                        GeneratedField::Streams => {
                            if streams__.is_some() {
                                return Err(serde::de::Error::duplicate_field("streams"));
                            }
                            streams__ = 
                                Some(map_.next_value::<::pbjson::private::NumberDeserialize<_>>()?.0)
                            ;
                        }
                        GeneratedField::Reporting => {
                            if reporting__.is_some() {
                                return Err(serde::de::Error::duplicate_field("reporting"));
                            }
                            reporting__ = Some(map_.next_value()?);
                        }
                        GeneratedField::LastLatencySeconds => {
                            if last_latency_seconds__.is_some() {
                                return Err(serde::de::Error::duplicate_field("lastLatencySeconds"));
                            }
                            last_latency_seconds__ = 
                                Some(map_.next_value::<::pbjson::private::NumberDeserialize<_>>()?.0)
                            ;
                        }
                    }
                }
                Ok(FleetNode {
                    node: node__.unwrap_or_default(),
                    sent_revision: sent_revision__.unwrap_or_default(),
                    applied_revision: applied_revision__.unwrap_or_default(),
                    revisions_behind: revisions_behind__.unwrap_or_default(),
                    seconds_behind: seconds_behind__.unwrap_or_default(),
                    error: error__.unwrap_or_default(),
                    streams: streams__.unwrap_or_default(),
                    reporting: reporting__.unwrap_or_default(),
                    last_latency_seconds: last_latency_seconds__.unwrap_or_default(),
                })
            }
        }
        deserializer.deserialize_struct("kpng.model.v1.FleetNode", FIELDS, GeneratedVisitor)
    }
}
impl serde::Serialize for FleetReply {
    #[allow(deprecated)]
    fn serialize<S>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error>
    where
        S: serde::Serializer,
    {
        use serde::ser::SerializeStruct;
        let mut len = 0;
        if self.instance != 0 {
            len += 1;
        }
        if self.revision != 0 {
            len += 1;
        }
        if self.nodes != 0 {
            len += 1;
        }
        if self.reporting != 0 {
            len += 1;
        }
        if self.up_to_date != 0 {
            len += 1;
        }
        if self.behind != 0 {
            len += 1;
        }
        if self.failing != 0 {
            len += 1;
        }
        if self.last_change_revision != 0 {
            len += 1;
        }
        if self.last_change_sent != 0 {
            len += 1;
        }
        if self.last_change_applied != 0 {
            len += 1;
        }
        if self.last_change_p50_seconds != 0. {
            len += 1;
        }
        if self.last_change_p99_seconds != 0. {
            len += 1;
        }
        if !self.latency_bounds.is_empty() {
            len += 1;
        }
        if !self.latency_counts.is_empty() {
            len += 1;
        }
        if self.latency_sum_seconds != 0. {
            len += 1;
        }
        if !self.listed.is_empty() {
            len += 1;
        }
        if self.away != 0 {
            len += 1;
        }
        let mut struct_ser = serializer.serialize_struct("kpng.model.v1.FleetReply", len)?;
        if self.instance != 0 {
            #[allow(clippy::needless_borrow)]
            #[allow(clippy::needless_borrows_for_generic_args)]
            struct_ser.serialize_field("instance", ToString::to_string(&self.instance).as_str())?;
        }
        if self.revision != 0 {
            #[allow(clippy::needless_borrow)]
            #[allow(clippy::needless_borrows_for_generic_args)]
            struct_ser.serialize_field("revision", ToString::to_string(&self.revision).as_str())?;
        }
        if self.nodes != 0 {
            #[allow(clippy::needless_borrow)]
            #[allow(clippy::needless_borrows_for_generic_args)]
            struct_ser.serialize_field("nodes", ToString::to_string(&self.nodes).as_str())?;
        }
        if self.reporting != 0 {
            #[allow(clippy::needless_borrow)]
            #[allow(clippy::needless_borrows_for_generic_args)]
            struct_ser.serialize_field("reporting", ToString::to_string(&self.reporting).as_str())?;
        }
        if self.up_to_date != 0 {
            #[allow(clippy::needless_borrow)]
            #[allow(clippy::needless_borrows_for_generic_args)]
            struct_ser.serialize_field("upToDate", ToString::to_string(&self.up_to_date).as_str())?;
        }
        if self.behind != 0 {
            #[allow(clippy::needless_borrow)]
            #[allow(clippy::needless_borrows_for_generic_args)]
            struct_ser.serialize_field("behind", ToString::to_string(&self.behind).as_str())?;
        }
        if self.failing != 0 {
            #[allow(clippy::needless_borrow)]
            #[allow(clippy::needless_borrows_for_generic_args)]
            struct_ser.serialize_field("failing", ToString::to_string(&self.failing).as_str())?;
        }
        if self.last_change_revision != 0 {
            #[allow(clippy::needless_borrow)]
            #[allow(clippy::needless_borrows_for_generic_args)]
            struct_ser.serialize_field("lastChangeRevision", ToString::to_string(&self.last_change_revision).as_str())?;
        }
        if self.last_change_sent != 0 {
            #[allow(clippy::needless_borrow)]
            #[allow(clippy::needless_borrows_for_generic_args)]
            struct_ser.serialize_field("lastChangeSent", ToString::to_string(&self.last_change_sent).as_str())?;
        }
        if self.last_change_applied != 0 {
            #[allow(clippy::needless_borrow)]
            #[allow(clippy::needless_borrows_for_generic_args)]
            struct_ser.serialize_field("lastChangeApplied", ToString::to_string(&self.last_change_applied).as_str())?;
        }
        if self.last_change_p50_seconds != 0. {
            struct_ser.serialize_field("lastChangeP50Seconds", &self.last_change_p50_seconds)?;
        }
        if self.last_change_p99_seconds != 0. {
            struct_ser.serialize_field("lastChangeP99Seconds", &self.last_change_p99_seconds)?;
        }
        if !self.latency_bounds.is_empty() {
            struct_ser.serialize_field("latencyBounds", &self.latency_bounds)?;
        }
        if !self.latency_counts.is_empty() {
            struct_ser.serialize_field("latencyCounts", &self.latency_counts.iter().map(ToString::to_string).collect::<Vec<_>>())?;
        }
        if self.latency_sum_seconds != 0. {
            struct_ser.serialize_field("latencySumSeconds", &self.latency_sum_seconds)?;
        }
        if !self.listed.is_empty() {
            struct_ser.serialize_field("listed", &self.listed)?;
        }
        if self.away != 0 {
            #[allow(clippy::needless_borrow)]
            #[allow(clippy::needless_borrows_for_generic_args)]
            struct_ser.serialize_field("away", ToString::to_string(&self.away).as_str())?;
        }
        struct_ser.end()
    }
}
impl<'de> serde::Deserialize<'de> for FleetReply {
    #[allow(deprecated)]
    fn deserialize<D>(deserializer: D) -> std::result::Result<Self, D::Error>
    where
        D: serde::Deserializer<'de>,
    {
        const FIELDS: &[&str] = &[
            "instance",
            "revision",
            "nodes",
            "reporting",
            "up_to_date",
            "upToDate",
            "behind",
            "failing",
            "last_change_revision",
            "lastChangeRevision",
            "last_change_sent",
            "lastChangeSent",
            "last_change_applied",
            "lastChangeApplied",
            "last_change_p50_seconds",
            "lastChangeP50Seconds",
            "last_change_p99_seconds",
            "lastChangeP99Seconds",
            "latency_bounds",
            "latencyBounds",
            "latency_counts",
            "latencyCounts",
            "latency_sum_seconds",
            "latencySumSeconds",
            "listed",
            "away",
        ];

        #[allow(clippy::enum_variant_names)]
        enum GeneratedField {
            Instance,
            Revision,
            Nodes,
            Reporting,
            UpToDate,
            Behind,
            Failing,
            LastChangeRevision,
            LastChangeSent,
            LastChangeApplied,
            LastChangeP50Seconds,
            LastChangeP99Seconds,
            LatencyBounds,
            LatencyCounts,
            LatencySumSeconds,
            Listed,
            Away,
        }
        impl<'de> serde::Deserialize<'de> for GeneratedField {
            fn deserialize<D>(deserializer: D) -> std::result::Result<GeneratedField, D::Error>
            where
                D: serde::Deserializer<'de>,
            {
                struct GeneratedVisitor;

                impl serde::de::Visitor<'_> for GeneratedVisitor {
                    type Value = GeneratedField;

                    fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                        write!(formatter, "expected one of: {:?}", &FIELDS)
                    }

                    #[allow(unused_variables)]
                    fn visit_str<E>(self, value: &str) -> std::result::Result<GeneratedField, E>
                    where
                        E: serde::de::Error,
                    {
                        match value {
                            "instance" => Ok(GeneratedField::Instance),
                            "revision" => Ok(GeneratedField::Revision),
                            "nodes" => Ok(GeneratedField::Nodes),
                            "reporting" => Ok(GeneratedField::Reporting),
                            "upToDate" | "up_to_date" => Ok(GeneratedField::UpToDate),
                            "behind" => Ok(GeneratedField::Behind),
                            "failing" => Ok(GeneratedField::Failing),
                            "lastChangeRevision" | "last_change_revision" => Ok(GeneratedField::LastChangeRevision),
                            "lastChangeSent" | "last_change_sent" => Ok(GeneratedField::LastChangeSent),
                            "lastChangeApplied" | "last_change_applied" => Ok(GeneratedField::LastChangeApplied),
                            "lastChangeP50Seconds" | "last_change_p50_seconds" => Ok(GeneratedField::LastChangeP50Seconds),
                            "lastChangeP99Seconds" | "last_change_p99_seconds" => Ok(GeneratedField::LastChangeP99Seconds),
                            "latencyBounds" | "latency_bounds" => Ok(GeneratedField::LatencyBounds),
                            "latencyCounts" | "latency_counts" => Ok(GeneratedField::LatencyCounts),
                            "latencySumSeconds" | "latency_sum_seconds" => Ok(GeneratedField::LatencySumSeconds),
                            "listed" => Ok(GeneratedField::Listed),
                            "away" => Ok(GeneratedField::Away),
                            _ => Err(serde::de::Error::unknown_field(value, FIELDS)),
                        }
                    }
                }
                deserializer.deserialize_identifier(GeneratedVisitor)
            }
        }
        struct GeneratedVisitor;
        impl<'de> serde::de::Visitor<'de> for GeneratedVisitor {
            type Value = FleetReply;

            fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                formatter.write_str("struct kpng.model.v1.FleetReply")
            }

            fn visit_map<V>(self, mut map_: V) -> std::result::Result<FleetReply, V::Error>
                where
                    V: serde::de::MapAccess<'de>,
            {
                let mut instance__ = None;
                let mut revision__ = None;
                let mut nodes__ = None;
                let mut reporting__ = None;
                let mut up_to_date__ = None;
                let mut behind__ = None;
                let mut failing__ = None;
                let mut last_change_revision__ = None;
                let mut last_change_sent__ = None;
                let mut last_change_applied__ = None;
                let mut last_change_p50_seconds__ = None;
                let mut last_change_p99_seconds__ = None;
                let mut latency_bounds__ = None;
                let mut latency_counts__ = None;
                let mut latency_sum_seconds__ = None;
                let mut listed__ = None;
                let mut away__ = None;
                while let Some(k) = map_.next_key()? {
                    match k {
                        GeneratedField::Instance => {
                            if instance__.is_some() {
                                return Err(serde::de::Error::duplicate_field("instance"));
                            }
                            instance__ = 
                                Some(map_.next_value::<::pbjson::private::NumberDeserialize<_>>()?.0)
                            ;
                        }
                        GeneratedField::Revision => {
                            if revision__.is_some() {
                                return Err(serde::de::Error::duplicate_field("revision"));
                            }
                            revision__ = 
                                Some(map_.next_value::<::pbjson::private::NumberDeserialize<_>>()?.0)
                            ;
                        }
                        GeneratedField::Nodes => {
                            if nodes__.is_some() {
                                return Err(serde::de::Error::duplicate_field("nodes"));
                            }
                            nodes__ = 
                                Some(map_.next_value::<::pbjson::private::NumberDeserialize<_>>()?.0)
                            ;
                        }
                        GeneratedField::Reporting => {
                            if reporting__.is_some() {
                                return Err(serde::de::Error::duplicate_field("reporting"));
                            }
                            reporting__ = 
                                Some(map_.next_value::<::pbjson::private::NumberDeserialize<_>>()?.0)
                            ;
                        }
                        GeneratedField::UpToDate => {
                            if up_to_date__.is_some() {
                                return Err(serde::de::Error::duplicate_field("upToDate"));
                            }
                            up_to_date__ = 
                                Some(map_.next_value::<::pbjson::private::NumberDeserialize<_>>()?.0)
                            ;
                        }
                        GeneratedField::Behind => {
                            if behind__.is_some() {
                                return Err(serde::de::Error::duplicate_field("behind"));
                            }
                            behind__ = 
                                Some(map_.next_value::<::pbjson::private::NumberDeserialize<_>>()?.0)
                            ;
                        }
                        GeneratedField::Failing => {
                            if failing__.is_some() {
                                return Err(serde::de::Error::duplicate_field("failing"));
                            }
                            failing__ = 
                                Some(map_.next_value::<::pbjson::private::NumberDeserialize<_>>()?.0)
                            ;
                        }
                        GeneratedField::LastChangeRevision => {
                            if last_change_revision__.is_some() {
                                return Err(serde::de::Error::duplicate_field("lastChangeRevision"));
                            }
                            last_change_revision__ = 
                                Some(map_.next_value::<::pbjson::private::NumberDeserialize<_>>()?.0)
                            ;
                        }
                        GeneratedField::LastChangeSent => {
                            if last_change_sent__.is_some() {
                                return Err(serde::de::Error::duplicate_field("lastChangeSent"));
                            }
                            last_change_sent__ = 
                                Some(map_.next_value::<::pbjson::private::NumberDeserialize<_>>()?.0)
                            ;
                        }
                        GeneratedField::LastChangeApplied => {
                            if last_change_applied__.is_some() {
                                return Err(serde::de::Error::duplicate_field("lastChangeApplied"));
                            }
                            last_change_applied__ = 
                                Some(map_.next_value::<::pbjson::private::NumberDeserialize<_>>()?.0)
                            ;
                        }
                        GeneratedField::LastChangeP50Seconds => {
                            if last_change_p50_seconds__.is_some() {
                                return Err(serde::de::Error::duplicate_field("lastChangeP50Seconds"));
                            }
                            last_change_p50_seconds__ = 
                                Some(map_.next_value::<::pbjson::private::NumberDeserialize<_>>()?.0)
                            ;
                        }
                        GeneratedField::LastChangeP99Seconds => {
                            if last_change_p99_seconds__.is_some() {
                                return Err(serde::de::Error::duplicate_field("lastChangeP99Seconds"));
                            }
                            last_change_p99_seconds__ = 
                                Some(map_.next_value::<::pbjson::private::NumberDeserialize<_>>()?.0)
                            ;
                        }
                        GeneratedField::LatencyBounds => {
                            if latency_bounds__.is_some() {
                                return Err(serde::de::Error::duplicate_field("latencyBounds"));
                            }
                            latency_bounds__ = 
                                Some(map_.next_value::<Vec<::pbjson::private::NumberDeserialize<_>>>()?
                                    .into_iter().map(|x| x.0).collect())
                            ;
                        }
                        GeneratedField::LatencyCounts => {
                            if latency_counts__.is_some() {
                                return Err(serde::de::Error::duplicate_field("latencyCounts"));
                            }
                            latency_counts__ = 
                                Some(map_.next_value::<Vec<::pbjson::private::NumberDeserialize<_>>>()?
                                    .into_iter().map(|x| x.0).collect())
                            ;
                        }
                        GeneratedField::LatencySumSeconds => {
                            if latency_sum_seconds__.is_some() {
                                return Err(serde::de::Error::duplicate_field("latencySumSeconds"));
                            }
                            latency_sum_seconds__ = 
                                Some(map_.next_value::<::pbjson::private::NumberDeserialize<_>>()?.0)
                            ;
                        }
                        GeneratedField::Listed => {
                            if listed__.is_some() {
                                return Err(serde::de::Error::duplicate_field("listed"));
                            }
                            listed__ = Some(map_.next_value()?);
                        }
                        GeneratedField::Away => {
                            if away__.is_some() {
                                return Err(serde::de::Error::duplicate_field("away"));
                            }
                            away__ = 
                                Some(map_.next_value::<::pbjson::private::NumberDeserialize<_>>()?.0)
                            ;
                        }
                    }
                }
                Ok(FleetReply {
                    instance: instance__.unwrap_or_default(),
                    revision: revision__.unwrap_or_default(),
                    nodes: nodes__.unwrap_or_default(),
                    reporting: reporting__.unwrap_or_default(),
                    up_to_date: up_to_date__.unwrap_or_default(),
                    behind: behind__.unwrap_or_default(),
                    failing: failing__.unwrap_or_default(),
                    last_change_revision: last_change_revision__.unwrap_or_default(),
                    last_change_sent: last_change_sent__.unwrap_or_default(),
                    last_change_applied: last_change_applied__.unwrap_or_default(),
                    last_change_p50_seconds: last_change_p50_seconds__.unwrap_or_default(),
                    last_change_p99_seconds: last_change_p99_seconds__.unwrap_or_default(),
                    latency_bounds: latency_bounds__.unwrap_or_default(),
                    latency_counts: latency_counts__.unwrap_or_default(),
                    latency_sum_seconds: latency_sum_seconds__.unwrap_or_default(),
                    listed: listed__.unwrap_or_default(),
                    away: away__.unwrap_or_default(),
                })
            }
        }
        deserializer.deserialize_struct("kpng.model.v1.FleetReply", FIELDS, GeneratedVisitor)
    }
}
impl serde::Serialize for FleetRequest {
    #[allow(deprecated)]
    fn serialize<S>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error>
    where
        S: serde::Serializer,
    {
        use serde::ser::SerializeStruct;
        let mut len = 0;
        if self.min_seconds_behind != 0. {
            len += 1;
        }
        if self.all {
            len += 1;
        }
        let mut struct_ser = serializer.serialize_struct("kpng.model.v1.FleetRequest", len)?;
        if self.min_seconds_behind != 0. {
            struct_ser.serialize_field("minSecondsBehind", &self.min_seconds_behind)?;
        }
        if self.all {
            struct_ser.serialize_field("all", &self.all)?;
        }
        struct_ser.end()
    }
}
impl<'de> serde::Deserialize<'de> for FleetRequest {
    #[allow(deprecated)]
    fn deserialize<D>(deserializer: D) -> std::result::Result<Self, D::Error>
    where
        D: serde::Deserializer<'de>,
    {
        const FIELDS: &[&str] = &[
            "min_seconds_behind",
            "minSecondsBehind",
            "all",
        ];

        #[allow(clippy::enum_variant_names)]
        enum GeneratedField {
            MinSecondsBehind,
            All,
        }
        impl<'de> serde::Deserialize<'de> for GeneratedField {
            fn deserialize<D>(deserializer: D) -> std::result::Result<GeneratedField, D::Error>
            where
                D: serde::Deserializer<'de>,
            {
                struct GeneratedVisitor;

                impl serde::de::Visitor<'_> for GeneratedVisitor {
                    type Value = GeneratedField;

                    fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                        write!(formatter, "expected one of: {:?}", &FIELDS)
                    }

                    #[allow(unused_variables)]
                    fn visit_str<E>(self, value: &str) -> std::result::Result<GeneratedField, E>
                    where
                        E: serde::de::Error,
                    {
                        match value {
                            "minSecondsBehind" | "min_seconds_behind" => Ok(GeneratedField::MinSecondsBehind),
                            "all" => Ok(GeneratedField::All),
                            _ => Err(serde::de::Error::unknown_field(value, FIELDS)),
                        }
                    }
                }
                deserializer.deserialize_identifier(GeneratedVisitor)
            }
        }
        struct GeneratedVisitor;
        impl<'de> serde::de::Visitor<'de> for GeneratedVisitor {
            type Value = FleetRequest;

            fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                formatter.write_str("struct kpng.model.v1.FleetRequest")
            }

            fn visit_map<V>(self, mut map_: V) -> std::result::Result<FleetRequest, V::Error>
                where
                    V: serde::de::MapAccess<'de>,
            {
                let mut min_seconds_behind__ = None;
                let mut all__ = None;
                while let Some(k) = map_.next_key()? {
                    match k {
                        GeneratedField::MinSecondsBehind => {
                            if min_seconds_behind__.is_some() {
                                return Err(serde::de::Error::duplicate_field("minSecondsBehind"));
                            }
                            min_seconds_behind__ = 
                                Some(map_.next_value::<::pbjson::private::NumberDeserialize<_>>()?.0)
                            ;
                        }
                        GeneratedField::All => {
                            if all__.is_some() {
                                return Err(serde::de::Error::duplicate_field("all"));
                            }
                            all__ = Some(map_.next_value()?);
                        }
                    }
                }
                Ok(FleetRequest {
                    min_seconds_behind: min_seconds_behind__.unwrap_or_default(),
                    all: all__.unwrap_or_default(),
                })
            }
        }
        deserializer.deserialize_struct("kpng.model.v1.FleetRequest", FIELDS, GeneratedVisitor)
    }
}
impl serde::Serialize for GlobalEvent {
    #[allow(deprecated)]
    fn serialize<S>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error>
    where
        S: serde::Serializer,
    {
        use serde::ser::SerializeStruct;
        let mut len = 0;
        if self.event.is_some() {
            len += 1;
        }
        let mut struct_ser = serializer.serialize_struct("kpng.model.v1.GlobalEvent", len)?;
        if let Some(v) = self.event.as_ref() {
            match v {
                global_event::Event::Reset(v) => {
                    struct_ser.serialize_field("reset", v)?;
                }
                global_event::Event::Changes(v) => {
                    struct_ser.serialize_field("changes", v)?;
                }
                global_event::Event::Sync(v) => {
                    #[allow(clippy::needless_borrow)]
                    #[allow(clippy::needless_borrows_for_generic_args)]
                    struct_ser.serialize_field("sync", ToString::to_string(&v).as_str())?;
                }
                global_event::Event::Instance(v) => {
                    #[allow(clippy::needless_borrow)]
                    #[allow(clippy::needless_borrows_for_generic_args)]
                    struct_ser.serialize_field("instance", ToString::to_string(&v).as_str())?;
                }
            }
        }
        struct_ser.end()
    }
}
impl<'de> serde::Deserialize<'de> for GlobalEvent {
    #[allow(deprecated)]
    fn deserialize<D>(deserializer: D) -> std::result::Result<Self, D::Error>
    where
        D: serde::Deserializer<'de>,
    {
        const FIELDS: &[&str] = &[
            "reset",
            "changes",
            "sync",
            "instance",
        ];

        #[allow(clippy::enum_variant_names)]
        enum GeneratedField {
            Reset,
            Changes,
            Sync,
            Instance,
        }
        impl<'de> serde::Deserialize<'de> for GeneratedField {
            fn deserialize<D>(deserializer: D) -> std::result::Result<GeneratedField, D::Error>
            where
                D: serde::Deserializer<'de>,
            {
                struct GeneratedVisitor;

                impl serde::de::Visitor<'_> for GeneratedVisitor {
                    type Value = GeneratedField;

                    fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                        write!(formatter, "expected one of: {:?}", &FIELDS)
                    }

                    #[allow(unused_variables)]
                    fn visit_str<E>(self, value: &str) -> std::result::Result<GeneratedField, E>
                    where
                        E: serde::de::Error,
                    {
                        match value {
                            "reset" => Ok(GeneratedField::Reset),
                            "changes" => Ok(GeneratedField::Changes),
                            "sync" => Ok(GeneratedField::Sync),
                            "instance" => Ok(GeneratedField::Instance),
                            _ => Err(serde::de::Error::unknown_field(value, FIELDS)),
                        }
                    }
                }
                deserializer.deserialize_identifier(GeneratedVisitor)
            }
        }
        struct GeneratedVisitor;
        impl<'de> serde::de::Visitor<'de> for GeneratedVisitor {
            type Value = GlobalEvent;

            fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                formatter.write_str("struct kpng.model.v1.GlobalEvent")
            }

            fn visit_map<V>(self, mut map_: V) -> std::result::Result<GlobalEvent, V::Error>
                where
                    V: serde::de::MapAccess<'de>,
            {
                let mut event__ = None;
                while let Some(k) = map_.next_key()? {
                    match k {
                        GeneratedField::Reset => {
                            if event__.is_some() {
                                return Err(serde::de::Error::duplicate_field("reset"));
                            }
                            event__ = map_.next_value::<::std::option::Option<_>>()?.map(global_event::Event::Reset);
                        }
                        GeneratedField::Changes => {
                            if event__.is_some() {
                                return Err(serde::de::Error::duplicate_field("changes"));
                            }
                            event__ = map_.next_value::<::std::option::Option<_>>()?.map(global_event::Event::Changes)
;
                        }
                        GeneratedField::Sync => {
                            if event__.is_some() {
                                return Err(serde::de::Error::duplicate_field("sync"));
                            }
                            event__ = map_.next_value::<::std::option::Option<::pbjson::private::NumberDeserialize<_>>>()?.map(|x| global_event::Event::Sync(x.0));
                        }
                        GeneratedField::Instance => {
                            if event__.is_some() {
                                return Err(serde::de::Error::duplicate_field("instance"));
                            }
                            event__ = map_.next_value::<::std::option::Option<::pbjson::private::NumberDeserialize<_>>>()?.map(|x| global_event::Event::Instance(x.0));
                        }
                    }
                }
                Ok(GlobalEvent {
                    event: event__,
                })
            }
        }
        deserializer.deserialize_struct("kpng.model.v1.GlobalEvent", FIELDS, GeneratedVisitor)
    }
}
impl serde::Serialize for IpSet {
    #[allow(deprecated)]
    fn serialize<S>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error>
    where
        S: serde::Serializer,
    {
        use serde::ser::SerializeStruct;
        let mut len = 0;
        if !self.v4.is_empty() {
            len += 1;
        }
        if !self.v6.is_empty() {
            len += 1;
        }
        let mut struct_ser = serializer.serialize_struct("kpng.model.v1.IpSet", len)?;
        if !self.v4.is_empty() {
            struct_ser.serialize_field("v4", &self.v4)?;
        }
        if !self.v6.is_empty() {
            struct_ser.serialize_field("v6", &self.v6)?;
        }
        struct_ser.end()
    }
}
impl<'de> serde::Deserialize<'de> for IpSet {
    #[allow(deprecated)]
    fn deserialize<D>(deserializer: D) -> std::result::Result<Self, D::Error>
    where
        D: serde::Deserializer<'de>,
    {
        const FIELDS: &[&str] = &[
            "v4",
            "v6",
        ];

        #[allow(clippy::enum_variant_names)]
        enum GeneratedField {
            V4,
            V6,
        }
        impl<'de> serde::Deserialize<'de> for GeneratedField {
            fn deserialize<D>(deserializer: D) -> std::result::Result<GeneratedField, D::Error>
            where
                D: serde::Deserializer<'de>,
            {
                struct GeneratedVisitor;

                impl serde::de::Visitor<'_> for GeneratedVisitor {
                    type Value = GeneratedField;

                    fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                        write!(formatter, "expected one of: {:?}", &FIELDS)
                    }

                    #[allow(unused_variables)]
                    fn visit_str<E>(self, value: &str) -> std::result::Result<GeneratedField, E>
                    where
                        E: serde::de::Error,
                    {
                        match value {
                            "v4" => Ok(GeneratedField::V4),
                            "v6" => Ok(GeneratedField::V6),
                            _ => Err(serde::de::Error::unknown_field(value, FIELDS)),
                        }
                    }
                }
                deserializer.deserialize_identifier(GeneratedVisitor)
            }
        }
        struct GeneratedVisitor;
        impl<'de> serde::de::Visitor<'de> for GeneratedVisitor {
            type Value = IpSet;

            fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                formatter.write_str("struct kpng.model.v1.IpSet")
            }

            fn visit_map<V>(self, mut map_: V) -> std::result::Result<IpSet, V::Error>
                where
                    V: serde::de::MapAccess<'de>,
            {
                let mut v4__ = None;
                let mut v6__ = None;
                while let Some(k) = map_.next_key()? {
                    match k {
                        GeneratedField::V4 => {
                            if v4__.is_some() {
                                return Err(serde::de::Error::duplicate_field("v4"));
                            }
                            v4__ = Some(map_.next_value()?);
                        }
                        GeneratedField::V6 => {
                            if v6__.is_some() {
                                return Err(serde::de::Error::duplicate_field("v6"));
                            }
                            v6__ = Some(map_.next_value()?);
                        }
                    }
                }
                Ok(IpSet {
                    v4: v4__.unwrap_or_default(),
                    v6: v6__.unwrap_or_default(),
                })
            }
        }
        deserializer.deserialize_struct("kpng.model.v1.IpSet", FIELDS, GeneratedVisitor)
    }
}
impl serde::Serialize for LoadBalancerMode {
    #[allow(deprecated)]
    fn serialize<S>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error>
    where
        S: serde::Serializer,
    {
        let variant = match self {
            Self::Unspecified => "LOAD_BALANCER_MODE_UNSPECIFIED",
            Self::Snat => "LOAD_BALANCER_MODE_SNAT",
            Self::Dsr => "LOAD_BALANCER_MODE_DSR",
            Self::Hybrid => "LOAD_BALANCER_MODE_HYBRID",
        };
        serializer.serialize_str(variant)
    }
}
impl<'de> serde::Deserialize<'de> for LoadBalancerMode {
    #[allow(deprecated)]
    fn deserialize<D>(deserializer: D) -> std::result::Result<Self, D::Error>
    where
        D: serde::Deserializer<'de>,
    {
        const FIELDS: &[&str] = &[
            "LOAD_BALANCER_MODE_UNSPECIFIED",
            "LOAD_BALANCER_MODE_SNAT",
            "LOAD_BALANCER_MODE_DSR",
            "LOAD_BALANCER_MODE_HYBRID",
        ];

        struct GeneratedVisitor;

        impl serde::de::Visitor<'_> for GeneratedVisitor {
            type Value = LoadBalancerMode;

            fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(formatter, "expected one of: {:?}", &FIELDS)
            }

            fn visit_i64<E>(self, v: i64) -> std::result::Result<Self::Value, E>
            where
                E: serde::de::Error,
            {
                i32::try_from(v)
                    .ok()
                    .and_then(|x| x.try_into().ok())
                    .ok_or_else(|| {
                        serde::de::Error::invalid_value(serde::de::Unexpected::Signed(v), &self)
                    })
            }

            fn visit_u64<E>(self, v: u64) -> std::result::Result<Self::Value, E>
            where
                E: serde::de::Error,
            {
                i32::try_from(v)
                    .ok()
                    .and_then(|x| x.try_into().ok())
                    .ok_or_else(|| {
                        serde::de::Error::invalid_value(serde::de::Unexpected::Unsigned(v), &self)
                    })
            }

            fn visit_str<E>(self, value: &str) -> std::result::Result<Self::Value, E>
            where
                E: serde::de::Error,
            {
                match value {
                    "LOAD_BALANCER_MODE_UNSPECIFIED" => Ok(LoadBalancerMode::Unspecified),
                    "LOAD_BALANCER_MODE_SNAT" => Ok(LoadBalancerMode::Snat),
                    "LOAD_BALANCER_MODE_DSR" => Ok(LoadBalancerMode::Dsr),
                    "LOAD_BALANCER_MODE_HYBRID" => Ok(LoadBalancerMode::Hybrid),
                    _ => Err(serde::de::Error::unknown_variant(value, FIELDS)),
                }
            }
        }
        deserializer.deserialize_any(GeneratedVisitor)
    }
}
impl serde::Serialize for Node {
    #[allow(deprecated)]
    fn serialize<S>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error>
    where
        S: serde::Serializer,
    {
        use serde::ser::SerializeStruct;
        let mut len = 0;
        if !self.name.is_empty() {
            len += 1;
        }
        if !self.zone.is_empty() {
            len += 1;
        }
        if !self.region.is_empty() {
            len += 1;
        }
        if self.addresses.is_some() {
            len += 1;
        }
        if self.terminating {
            len += 1;
        }
        let mut struct_ser = serializer.serialize_struct("kpng.model.v1.Node", len)?;
        if !self.name.is_empty() {
            struct_ser.serialize_field("name", &self.name)?;
        }
        if !self.zone.is_empty() {
            struct_ser.serialize_field("zone", &self.zone)?;
        }
        if !self.region.is_empty() {
            struct_ser.serialize_field("region", &self.region)?;
        }
        if let Some(v) = self.addresses.as_ref() {
            struct_ser.serialize_field("addresses", v)?;
        }
        if self.terminating {
            struct_ser.serialize_field("terminating", &self.terminating)?;
        }
        struct_ser.end()
    }
}
impl<'de> serde::Deserialize<'de> for Node {
    #[allow(deprecated)]
    fn deserialize<D>(deserializer: D) -> std::result::Result<Self, D::Error>
    where
        D: serde::Deserializer<'de>,
    {
        const FIELDS: &[&str] = &[
            "name",
            "zone",
            "region",
            "addresses",
            "terminating",
        ];

        #[allow(clippy::enum_variant_names)]
        enum GeneratedField {
            Name,
            Zone,
            Region,
            Addresses,
            Terminating,
        }
        impl<'de> serde::Deserialize<'de> for GeneratedField {
            fn deserialize<D>(deserializer: D) -> std::result::Result<GeneratedField, D::Error>
            where
                D: serde::Deserializer<'de>,
            {
                struct GeneratedVisitor;

                impl serde::de::Visitor<'_> for GeneratedVisitor {
                    type Value = GeneratedField;

                    fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                        write!(formatter, "expected one of: {:?}", &FIELDS)
                    }

                    #[allow(unused_variables)]
                    fn visit_str<E>(self, value: &str) -> std::result::Result<GeneratedField, E>
                    where
                        E: serde::de::Error,
                    {
                        match value {
                            "name" => Ok(GeneratedField::Name),
                            "zone" => Ok(GeneratedField::Zone),
                            "region" => Ok(GeneratedField::Region),
                            "addresses" => Ok(GeneratedField::Addresses),
                            "terminating" => Ok(GeneratedField::Terminating),
                            _ => Err(serde::de::Error::unknown_field(value, FIELDS)),
                        }
                    }
                }
                deserializer.deserialize_identifier(GeneratedVisitor)
            }
        }
        struct GeneratedVisitor;
        impl<'de> serde::de::Visitor<'de> for GeneratedVisitor {
            type Value = Node;

            fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                formatter.write_str("struct kpng.model.v1.Node")
            }

            fn visit_map<V>(self, mut map_: V) -> std::result::Result<Node, V::Error>
                where
                    V: serde::de::MapAccess<'de>,
            {
                let mut name__ = None;
                let mut zone__ = None;
                let mut region__ = None;
                let mut addresses__ = None;
                let mut terminating__ = None;
                while let Some(k) = map_.next_key()? {
                    match k {
                        GeneratedField::Name => {
                            if name__.is_some() {
                                return Err(serde::de::Error::duplicate_field("name"));
                            }
                            name__ = Some(map_.next_value()?);
                        }
                        GeneratedField::Zone => {
                            if zone__.is_some() {
                                return Err(serde::de::Error::duplicate_field("zone"));
                            }
                            zone__ = Some(map_.next_value()?);
                        }
                        GeneratedField::Region => {
                            if region__.is_some() {
                                return Err(serde::de::Error::duplicate_field("region"));
                            }
                            region__ = Some(map_.next_value()?);
                        }
                        GeneratedField::Addresses => {
                            if addresses__.is_some() {
                                return Err(serde::de::Error::duplicate_field("addresses"));
                            }
                            addresses__ = map_.next_value()?;
                        }
                        GeneratedField::Terminating => {
                            if terminating__.is_some() {
                                return Err(serde::de::Error::duplicate_field("terminating"));
                            }
                            terminating__ = Some(map_.next_value()?);
                        }
                    }
                }
                Ok(Node {
                    name: name__.unwrap_or_default(),
                    zone: zone__.unwrap_or_default(),
                    region: region__.unwrap_or_default(),
                    addresses: addresses__,
                    terminating: terminating__.unwrap_or_default(),
                })
            }
        }
        deserializer.deserialize_struct("kpng.model.v1.Node", FIELDS, GeneratedVisitor)
    }
}
impl serde::Serialize for NodeReport {
    #[allow(deprecated)]
    fn serialize<S>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error>
    where
        S: serde::Serializer,
    {
        use serde::ser::SerializeStruct;
        let mut len = 0;
        if !self.node.is_empty() {
            len += 1;
        }
        if self.instance != 0 {
            len += 1;
        }
        if self.revision != 0 {
            len += 1;
        }
        if !self.error.is_empty() {
            len += 1;
        }
        if self.held_ms != 0 {
            len += 1;
        }
        let mut struct_ser = serializer.serialize_struct("kpng.model.v1.NodeReport", len)?;
        if !self.node.is_empty() {
            struct_ser.serialize_field("node", &self.node)?;
        }
        if self.instance != 0 {
            #[allow(clippy::needless_borrow)]
            #[allow(clippy::needless_borrows_for_generic_args)]
            struct_ser.serialize_field("instance", ToString::to_string(&self.instance).as_str())?;
        }
        if self.revision != 0 {
            #[allow(clippy::needless_borrow)]
            #[allow(clippy::needless_borrows_for_generic_args)]
            struct_ser.serialize_field("revision", ToString::to_string(&self.revision).as_str())?;
        }
        if !self.error.is_empty() {
            struct_ser.serialize_field("error", &self.error)?;
        }
        if self.held_ms != 0 {
            struct_ser.serialize_field("heldMs", &self.held_ms)?;
        }
        struct_ser.end()
    }
}
impl<'de> serde::Deserialize<'de> for NodeReport {
    #[allow(deprecated)]
    fn deserialize<D>(deserializer: D) -> std::result::Result<Self, D::Error>
    where
        D: serde::Deserializer<'de>,
    {
        const FIELDS: &[&str] = &[
            "node",
            "instance",
            "revision",
            "error",
            "held_ms",
            "heldMs",
        ];

        #[allow(clippy::enum_variant_names)]
        enum GeneratedField {
            Node,
            Instance,
            Revision,
            Error,
            HeldMs,
        }
        impl<'de> serde::Deserialize<'de> for GeneratedField {
            fn deserialize<D>(deserializer: D) -> std::result::Result<GeneratedField, D::Error>
            where
                D: serde::Deserializer<'de>,
            {
                struct GeneratedVisitor;

                impl serde::de::Visitor<'_> for GeneratedVisitor {
                    type Value = GeneratedField;

                    fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                        write!(formatter, "expected one of: {:?}", &FIELDS)
                    }

                    #[allow(unused_variables)]
                    fn visit_str<E>(self, value: &str) -> std::result::Result<GeneratedField, E>
                    where
                        E: serde::de::Error,
                    {
                        match value {
                            "node" => Ok(GeneratedField::Node),
                            "instance" => Ok(GeneratedField::Instance),
                            "revision" => Ok(GeneratedField::Revision),
                            "error" => Ok(GeneratedField::Error),
                            "heldMs" | "held_ms" => Ok(GeneratedField::HeldMs),
                            _ => Err(serde::de::Error::unknown_field(value, FIELDS)),
                        }
                    }
                }
                deserializer.deserialize_identifier(GeneratedVisitor)
            }
        }
        struct GeneratedVisitor;
        impl<'de> serde::de::Visitor<'de> for GeneratedVisitor {
            type Value = NodeReport;

            fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                formatter.write_str("struct kpng.model.v1.NodeReport")
            }

            fn visit_map<V>(self, mut map_: V) -> std::result::Result<NodeReport, V::Error>
                where
                    V: serde::de::MapAccess<'de>,
            {
                let mut node__ = None;
                let mut instance__ = None;
                let mut revision__ = None;
                let mut error__ = None;
                let mut held_ms__ = None;
                while let Some(k) = map_.next_key()? {
                    match k {
                        GeneratedField::Node => {
                            if node__.is_some() {
                                return Err(serde::de::Error::duplicate_field("node"));
                            }
                            node__ = Some(map_.next_value()?);
                        }
                        GeneratedField::Instance => {
                            if instance__.is_some() {
                                return Err(serde::de::Error::duplicate_field("instance"));
                            }
                            instance__ = 
                                Some(map_.next_value::<::pbjson::private::NumberDeserialize<_>>()?.0)
                            ;
                        }
                        GeneratedField::Revision => {
                            if revision__.is_some() {
                                return Err(serde::de::Error::duplicate_field("revision"));
                            }
                            revision__ = 
                                Some(map_.next_value::<::pbjson::private::NumberDeserialize<_>>()?.0)
                            ;
                        }
                        GeneratedField::Error => {
                            if error__.is_some() {
                                return Err(serde::de::Error::duplicate_field("error"));
                            }
                            error__ = Some(map_.next_value()?);
                        }
                        GeneratedField::HeldMs => {
                            if held_ms__.is_some() {
                                return Err(serde::de::Error::duplicate_field("heldMs"));
                            }
                            held_ms__ = 
                                Some(map_.next_value::<::pbjson::private::NumberDeserialize<_>>()?.0)
                            ;
                        }
                    }
                }
                Ok(NodeReport {
                    node: node__.unwrap_or_default(),
                    instance: instance__.unwrap_or_default(),
                    revision: revision__.unwrap_or_default(),
                    error: error__.unwrap_or_default(),
                    held_ms: held_ms__.unwrap_or_default(),
                })
            }
        }
        deserializer.deserialize_struct("kpng.model.v1.NodeReport", FIELDS, GeneratedVisitor)
    }
}
impl serde::Serialize for PortList {
    #[allow(deprecated)]
    fn serialize<S>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error>
    where
        S: serde::Serializer,
    {
        use serde::ser::SerializeStruct;
        let mut len = 0;
        if !self.ports.is_empty() {
            len += 1;
        }
        let mut struct_ser = serializer.serialize_struct("kpng.model.v1.PortList", len)?;
        if !self.ports.is_empty() {
            struct_ser.serialize_field("ports", &self.ports)?;
        }
        struct_ser.end()
    }
}
impl<'de> serde::Deserialize<'de> for PortList {
    #[allow(deprecated)]
    fn deserialize<D>(deserializer: D) -> std::result::Result<Self, D::Error>
    where
        D: serde::Deserializer<'de>,
    {
        const FIELDS: &[&str] = &[
            "ports",
        ];

        #[allow(clippy::enum_variant_names)]
        enum GeneratedField {
            Ports,
        }
        impl<'de> serde::Deserialize<'de> for GeneratedField {
            fn deserialize<D>(deserializer: D) -> std::result::Result<GeneratedField, D::Error>
            where
                D: serde::Deserializer<'de>,
            {
                struct GeneratedVisitor;

                impl serde::de::Visitor<'_> for GeneratedVisitor {
                    type Value = GeneratedField;

                    fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                        write!(formatter, "expected one of: {:?}", &FIELDS)
                    }

                    #[allow(unused_variables)]
                    fn visit_str<E>(self, value: &str) -> std::result::Result<GeneratedField, E>
                    where
                        E: serde::de::Error,
                    {
                        match value {
                            "ports" => Ok(GeneratedField::Ports),
                            _ => Err(serde::de::Error::unknown_field(value, FIELDS)),
                        }
                    }
                }
                deserializer.deserialize_identifier(GeneratedVisitor)
            }
        }
        struct GeneratedVisitor;
        impl<'de> serde::de::Visitor<'de> for GeneratedVisitor {
            type Value = PortList;

            fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                formatter.write_str("struct kpng.model.v1.PortList")
            }

            fn visit_map<V>(self, mut map_: V) -> std::result::Result<PortList, V::Error>
                where
                    V: serde::de::MapAccess<'de>,
            {
                let mut ports__ = None;
                while let Some(k) = map_.next_key()? {
                    match k {
                        GeneratedField::Ports => {
                            if ports__.is_some() {
                                return Err(serde::de::Error::duplicate_field("ports"));
                            }
                            ports__ = Some(map_.next_value()?);
                        }
                    }
                }
                Ok(PortList {
                    ports: ports__.unwrap_or_default(),
                })
            }
        }
        deserializer.deserialize_struct("kpng.model.v1.PortList", FIELDS, GeneratedVisitor)
    }
}
impl serde::Serialize for Protocol {
    #[allow(deprecated)]
    fn serialize<S>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error>
    where
        S: serde::Serializer,
    {
        let variant = match self {
            Self::Unspecified => "PROTOCOL_UNSPECIFIED",
            Self::Tcp => "PROTOCOL_TCP",
            Self::Udp => "PROTOCOL_UDP",
            Self::Sctp => "PROTOCOL_SCTP",
        };
        serializer.serialize_str(variant)
    }
}
impl<'de> serde::Deserialize<'de> for Protocol {
    #[allow(deprecated)]
    fn deserialize<D>(deserializer: D) -> std::result::Result<Self, D::Error>
    where
        D: serde::Deserializer<'de>,
    {
        const FIELDS: &[&str] = &[
            "PROTOCOL_UNSPECIFIED",
            "PROTOCOL_TCP",
            "PROTOCOL_UDP",
            "PROTOCOL_SCTP",
        ];

        struct GeneratedVisitor;

        impl serde::de::Visitor<'_> for GeneratedVisitor {
            type Value = Protocol;

            fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(formatter, "expected one of: {:?}", &FIELDS)
            }

            fn visit_i64<E>(self, v: i64) -> std::result::Result<Self::Value, E>
            where
                E: serde::de::Error,
            {
                i32::try_from(v)
                    .ok()
                    .and_then(|x| x.try_into().ok())
                    .ok_or_else(|| {
                        serde::de::Error::invalid_value(serde::de::Unexpected::Signed(v), &self)
                    })
            }

            fn visit_u64<E>(self, v: u64) -> std::result::Result<Self::Value, E>
            where
                E: serde::de::Error,
            {
                i32::try_from(v)
                    .ok()
                    .and_then(|x| x.try_into().ok())
                    .ok_or_else(|| {
                        serde::de::Error::invalid_value(serde::de::Unexpected::Unsigned(v), &self)
                    })
            }

            fn visit_str<E>(self, value: &str) -> std::result::Result<Self::Value, E>
            where
                E: serde::de::Error,
            {
                match value {
                    "PROTOCOL_UNSPECIFIED" => Ok(Protocol::Unspecified),
                    "PROTOCOL_TCP" => Ok(Protocol::Tcp),
                    "PROTOCOL_UDP" => Ok(Protocol::Udp),
                    "PROTOCOL_SCTP" => Ok(Protocol::Sctp),
                    _ => Err(serde::de::Error::unknown_variant(value, FIELDS)),
                }
            }
        }
        deserializer.deserialize_any(GeneratedVisitor)
    }
}
impl serde::Serialize for ReportReply {
    #[allow(deprecated)]
    fn serialize<S>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error>
    where
        S: serde::Serializer,
    {
        use serde::ser::SerializeStruct;
        let len = 0;
        let struct_ser = serializer.serialize_struct("kpng.model.v1.ReportReply", len)?;
        struct_ser.end()
    }
}
impl<'de> serde::Deserialize<'de> for ReportReply {
    #[allow(deprecated)]
    fn deserialize<D>(deserializer: D) -> std::result::Result<Self, D::Error>
    where
        D: serde::Deserializer<'de>,
    {
        const FIELDS: &[&str] = &[
        ];

        #[allow(clippy::enum_variant_names)]
        enum GeneratedField {
        }
        impl<'de> serde::Deserialize<'de> for GeneratedField {
            fn deserialize<D>(deserializer: D) -> std::result::Result<GeneratedField, D::Error>
            where
                D: serde::Deserializer<'de>,
            {
                struct GeneratedVisitor;

                impl serde::de::Visitor<'_> for GeneratedVisitor {
                    type Value = GeneratedField;

                    fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                        write!(formatter, "expected one of: {:?}", &FIELDS)
                    }

                    #[allow(unused_variables)]
                    fn visit_str<E>(self, value: &str) -> std::result::Result<GeneratedField, E>
                    where
                        E: serde::de::Error,
                    {
                            Err(serde::de::Error::unknown_field(value, FIELDS))
                    }
                }
                deserializer.deserialize_identifier(GeneratedVisitor)
            }
        }
        struct GeneratedVisitor;
        impl<'de> serde::de::Visitor<'de> for GeneratedVisitor {
            type Value = ReportReply;

            fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                formatter.write_str("struct kpng.model.v1.ReportReply")
            }

            fn visit_map<V>(self, mut map_: V) -> std::result::Result<ReportReply, V::Error>
                where
                    V: serde::de::MapAccess<'de>,
            {
                while map_.next_key::<GeneratedField>()?.is_some() {
                    let _ = map_.next_value::<serde::de::IgnoredAny>()?;
                }
                Ok(ReportReply {
                })
            }
        }
        deserializer.deserialize_struct("kpng.model.v1.ReportReply", FIELDS, GeneratedVisitor)
    }
}
impl serde::Serialize for Service {
    #[allow(deprecated)]
    fn serialize<S>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error>
    where
        S: serde::Serializer,
    {
        use serde::ser::SerializeStruct;
        let mut len = 0;
        if !self.namespace.is_empty() {
            len += 1;
        }
        if !self.name.is_empty() {
            len += 1;
        }
        if self.r#type != 0 {
            len += 1;
        }
        if self.cluster_ips.is_some() {
            len += 1;
        }
        if self.external_ips.is_some() {
            len += 1;
        }
        if self.load_balancer_ips.is_some() {
            len += 1;
        }
        if self.load_balancer_proxy_ips.is_some() {
            len += 1;
        }
        if !self.ports.is_empty() {
            len += 1;
        }
        if self.client_ip_affinity.is_some() {
            len += 1;
        }
        if self.external_traffic_policy != 0 {
            len += 1;
        }
        if self.internal_traffic_policy != 0 {
            len += 1;
        }
        if self.health_check_node_port != 0 {
            len += 1;
        }
        if self.load_balancer_source_ranges.is_some() {
            len += 1;
        }
        if !self.traffic_distribution.is_empty() {
            len += 1;
        }
        if self.balancing != 0 {
            len += 1;
        }
        if self.load_balancer_mode != 0 {
            len += 1;
        }
        let mut struct_ser = serializer.serialize_struct("kpng.model.v1.Service", len)?;
        if !self.namespace.is_empty() {
            struct_ser.serialize_field("namespace", &self.namespace)?;
        }
        if !self.name.is_empty() {
            struct_ser.serialize_field("name", &self.name)?;
        }
        if self.r#type != 0 {
            let v = ServiceType::try_from(self.r#type)
                .map_err(|_| serde::ser::Error::custom(format!("Invalid variant {}", self.r#type)))?;
            struct_ser.serialize_field("type", &v)?;
        }
        if let Some(v) = self.cluster_ips.as_ref() {
            struct_ser.serialize_field("clusterIps", v)?;
        }
        if let Some(v) = self.external_ips.as_ref() {
            struct_ser.serialize_field("externalIps", v)?;
        }
        if let Some(v) = self.load_balancer_ips.as_ref() {
            struct_ser.serialize_field("loadBalancerIps", v)?;
        }
        if let Some(v) = self.load_balancer_proxy_ips.as_ref() {
            struct_ser.serialize_field("loadBalancerProxyIps", v)?;
        }
        if !self.ports.is_empty() {
            struct_ser.serialize_field("ports", &self.ports)?;
        }
        if let Some(v) = self.client_ip_affinity.as_ref() {
            struct_ser.serialize_field("clientIpAffinity", v)?;
        }
        if self.external_traffic_policy != 0 {
            let v = TrafficPolicy::try_from(self.external_traffic_policy)
                .map_err(|_| serde::ser::Error::custom(format!("Invalid variant {}", self.external_traffic_policy)))?;
            struct_ser.serialize_field("externalTrafficPolicy", &v)?;
        }
        if self.internal_traffic_policy != 0 {
            let v = TrafficPolicy::try_from(self.internal_traffic_policy)
                .map_err(|_| serde::ser::Error::custom(format!("Invalid variant {}", self.internal_traffic_policy)))?;
            struct_ser.serialize_field("internalTrafficPolicy", &v)?;
        }
        if self.health_check_node_port != 0 {
            struct_ser.serialize_field("healthCheckNodePort", &self.health_check_node_port)?;
        }
        if let Some(v) = self.load_balancer_source_ranges.as_ref() {
            struct_ser.serialize_field("loadBalancerSourceRanges", v)?;
        }
        if !self.traffic_distribution.is_empty() {
            struct_ser.serialize_field("trafficDistribution", &self.traffic_distribution)?;
        }
        if self.balancing != 0 {
            let v = Balancing::try_from(self.balancing)
                .map_err(|_| serde::ser::Error::custom(format!("Invalid variant {}", self.balancing)))?;
            struct_ser.serialize_field("balancing", &v)?;
        }
        if self.load_balancer_mode != 0 {
            let v = LoadBalancerMode::try_from(self.load_balancer_mode)
                .map_err(|_| serde::ser::Error::custom(format!("Invalid variant {}", self.load_balancer_mode)))?;
            struct_ser.serialize_field("loadBalancerMode", &v)?;
        }
        struct_ser.end()
    }
}
impl<'de> serde::Deserialize<'de> for Service {
    #[allow(deprecated)]
    fn deserialize<D>(deserializer: D) -> std::result::Result<Self, D::Error>
    where
        D: serde::Deserializer<'de>,
    {
        const FIELDS: &[&str] = &[
            "namespace",
            "name",
            "type",
            "cluster_ips",
            "clusterIps",
            "external_ips",
            "externalIps",
            "load_balancer_ips",
            "loadBalancerIps",
            "load_balancer_proxy_ips",
            "loadBalancerProxyIps",
            "ports",
            "client_ip_affinity",
            "clientIpAffinity",
            "external_traffic_policy",
            "externalTrafficPolicy",
            "internal_traffic_policy",
            "internalTrafficPolicy",
            "health_check_node_port",
            "healthCheckNodePort",
            "load_balancer_source_ranges",
            "loadBalancerSourceRanges",
            "traffic_distribution",
            "trafficDistribution",
            "balancing",
            "load_balancer_mode",
            "loadBalancerMode",
        ];

        #[allow(clippy::enum_variant_names)]
        enum GeneratedField {
            Namespace,
            Name,
            Type,
            ClusterIps,
            ExternalIps,
            LoadBalancerIps,
            LoadBalancerProxyIps,
            Ports,
            ClientIpAffinity,
            ExternalTrafficPolicy,
            InternalTrafficPolicy,
            HealthCheckNodePort,
            LoadBalancerSourceRanges,
            TrafficDistribution,
            Balancing,
            LoadBalancerMode,
        }
        impl<'de> serde::Deserialize<'de> for GeneratedField {
            fn deserialize<D>(deserializer: D) -> std::result::Result<GeneratedField, D::Error>
            where
                D: serde::Deserializer<'de>,
            {
                struct GeneratedVisitor;

                impl serde::de::Visitor<'_> for GeneratedVisitor {
                    type Value = GeneratedField;

                    fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                        write!(formatter, "expected one of: {:?}", &FIELDS)
                    }

                    #[allow(unused_variables)]
                    fn visit_str<E>(self, value: &str) -> std::result::Result<GeneratedField, E>
                    where
                        E: serde::de::Error,
                    {
                        match value {
                            "namespace" => Ok(GeneratedField::Namespace),
                            "name" => Ok(GeneratedField::Name),
                            "type" => Ok(GeneratedField::Type),
                            "clusterIps" | "cluster_ips" => Ok(GeneratedField::ClusterIps),
                            "externalIps" | "external_ips" => Ok(GeneratedField::ExternalIps),
                            "loadBalancerIps" | "load_balancer_ips" => Ok(GeneratedField::LoadBalancerIps),
                            "loadBalancerProxyIps" | "load_balancer_proxy_ips" => Ok(GeneratedField::LoadBalancerProxyIps),
                            "ports" => Ok(GeneratedField::Ports),
                            "clientIpAffinity" | "client_ip_affinity" => Ok(GeneratedField::ClientIpAffinity),
                            "externalTrafficPolicy" | "external_traffic_policy" => Ok(GeneratedField::ExternalTrafficPolicy),
                            "internalTrafficPolicy" | "internal_traffic_policy" => Ok(GeneratedField::InternalTrafficPolicy),
                            "healthCheckNodePort" | "health_check_node_port" => Ok(GeneratedField::HealthCheckNodePort),
                            "loadBalancerSourceRanges" | "load_balancer_source_ranges" => Ok(GeneratedField::LoadBalancerSourceRanges),
                            "trafficDistribution" | "traffic_distribution" => Ok(GeneratedField::TrafficDistribution),
                            "balancing" => Ok(GeneratedField::Balancing),
                            "loadBalancerMode" | "load_balancer_mode" => Ok(GeneratedField::LoadBalancerMode),
                            _ => Err(serde::de::Error::unknown_field(value, FIELDS)),
                        }
                    }
                }
                deserializer.deserialize_identifier(GeneratedVisitor)
            }
        }
        struct GeneratedVisitor;
        impl<'de> serde::de::Visitor<'de> for GeneratedVisitor {
            type Value = Service;

            fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                formatter.write_str("struct kpng.model.v1.Service")
            }

            fn visit_map<V>(self, mut map_: V) -> std::result::Result<Service, V::Error>
                where
                    V: serde::de::MapAccess<'de>,
            {
                let mut namespace__ = None;
                let mut name__ = None;
                let mut r#type__ = None;
                let mut cluster_ips__ = None;
                let mut external_ips__ = None;
                let mut load_balancer_ips__ = None;
                let mut load_balancer_proxy_ips__ = None;
                let mut ports__ = None;
                let mut client_ip_affinity__ = None;
                let mut external_traffic_policy__ = None;
                let mut internal_traffic_policy__ = None;
                let mut health_check_node_port__ = None;
                let mut load_balancer_source_ranges__ = None;
                let mut traffic_distribution__ = None;
                let mut balancing__ = None;
                let mut load_balancer_mode__ = None;
                while let Some(k) = map_.next_key()? {
                    match k {
                        GeneratedField::Namespace => {
                            if namespace__.is_some() {
                                return Err(serde::de::Error::duplicate_field("namespace"));
                            }
                            namespace__ = Some(map_.next_value()?);
                        }
                        GeneratedField::Name => {
                            if name__.is_some() {
                                return Err(serde::de::Error::duplicate_field("name"));
                            }
                            name__ = Some(map_.next_value()?);
                        }
                        GeneratedField::Type => {
                            if r#type__.is_some() {
                                return Err(serde::de::Error::duplicate_field("type"));
                            }
                            r#type__ = Some(map_.next_value::<ServiceType>()? as i32);
                        }
                        GeneratedField::ClusterIps => {
                            if cluster_ips__.is_some() {
                                return Err(serde::de::Error::duplicate_field("clusterIps"));
                            }
                            cluster_ips__ = map_.next_value()?;
                        }
                        GeneratedField::ExternalIps => {
                            if external_ips__.is_some() {
                                return Err(serde::de::Error::duplicate_field("externalIps"));
                            }
                            external_ips__ = map_.next_value()?;
                        }
                        GeneratedField::LoadBalancerIps => {
                            if load_balancer_ips__.is_some() {
                                return Err(serde::de::Error::duplicate_field("loadBalancerIps"));
                            }
                            load_balancer_ips__ = map_.next_value()?;
                        }
                        GeneratedField::LoadBalancerProxyIps => {
                            if load_balancer_proxy_ips__.is_some() {
                                return Err(serde::de::Error::duplicate_field("loadBalancerProxyIps"));
                            }
                            load_balancer_proxy_ips__ = map_.next_value()?;
                        }
                        GeneratedField::Ports => {
                            if ports__.is_some() {
                                return Err(serde::de::Error::duplicate_field("ports"));
                            }
                            ports__ = Some(map_.next_value()?);
                        }
                        GeneratedField::ClientIpAffinity => {
                            if client_ip_affinity__.is_some() {
                                return Err(serde::de::Error::duplicate_field("clientIpAffinity"));
                            }
                            client_ip_affinity__ = map_.next_value()?;
                        }
                        GeneratedField::ExternalTrafficPolicy => {
                            if external_traffic_policy__.is_some() {
                                return Err(serde::de::Error::duplicate_field("externalTrafficPolicy"));
                            }
                            external_traffic_policy__ = Some(map_.next_value::<TrafficPolicy>()? as i32);
                        }
                        GeneratedField::InternalTrafficPolicy => {
                            if internal_traffic_policy__.is_some() {
                                return Err(serde::de::Error::duplicate_field("internalTrafficPolicy"));
                            }
                            internal_traffic_policy__ = Some(map_.next_value::<TrafficPolicy>()? as i32);
                        }
                        GeneratedField::HealthCheckNodePort => {
                            if health_check_node_port__.is_some() {
                                return Err(serde::de::Error::duplicate_field("healthCheckNodePort"));
                            }
                            health_check_node_port__ = 
                                Some(map_.next_value::<::pbjson::private::NumberDeserialize<_>>()?.0)
                            ;
                        }
                        GeneratedField::LoadBalancerSourceRanges => {
                            if load_balancer_source_ranges__.is_some() {
                                return Err(serde::de::Error::duplicate_field("loadBalancerSourceRanges"));
                            }
                            load_balancer_source_ranges__ = map_.next_value()?;
                        }
                        GeneratedField::TrafficDistribution => {
                            if traffic_distribution__.is_some() {
                                return Err(serde::de::Error::duplicate_field("trafficDistribution"));
                            }
                            traffic_distribution__ = Some(map_.next_value()?);
                        }
                        GeneratedField::Balancing => {
                            if balancing__.is_some() {
                                return Err(serde::de::Error::duplicate_field("balancing"));
                            }
                            balancing__ = Some(map_.next_value::<Balancing>()? as i32);
                        }
                        GeneratedField::LoadBalancerMode => {
                            if load_balancer_mode__.is_some() {
                                return Err(serde::de::Error::duplicate_field("loadBalancerMode"));
                            }
                            load_balancer_mode__ = Some(map_.next_value::<LoadBalancerMode>()? as i32);
                        }
                    }
                }
                Ok(Service {
                    namespace: namespace__.unwrap_or_default(),
                    name: name__.unwrap_or_default(),
                    r#type: r#type__.unwrap_or_default(),
                    cluster_ips: cluster_ips__,
                    external_ips: external_ips__,
                    load_balancer_ips: load_balancer_ips__,
                    load_balancer_proxy_ips: load_balancer_proxy_ips__,
                    ports: ports__.unwrap_or_default(),
                    client_ip_affinity: client_ip_affinity__,
                    external_traffic_policy: external_traffic_policy__.unwrap_or_default(),
                    internal_traffic_policy: internal_traffic_policy__.unwrap_or_default(),
                    health_check_node_port: health_check_node_port__.unwrap_or_default(),
                    load_balancer_source_ranges: load_balancer_source_ranges__,
                    traffic_distribution: traffic_distribution__.unwrap_or_default(),
                    balancing: balancing__.unwrap_or_default(),
                    load_balancer_mode: load_balancer_mode__.unwrap_or_default(),
                })
            }
        }
        deserializer.deserialize_struct("kpng.model.v1.Service", FIELDS, GeneratedVisitor)
    }
}
impl serde::Serialize for ServiceCidr {
    #[allow(deprecated)]
    fn serialize<S>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error>
    where
        S: serde::Serializer,
    {
        use serde::ser::SerializeStruct;
        let mut len = 0;
        if !self.name.is_empty() {
            len += 1;
        }
        if self.cidrs.is_some() {
            len += 1;
        }
        let mut struct_ser = serializer.serialize_struct("kpng.model.v1.ServiceCidr", len)?;
        if !self.name.is_empty() {
            struct_ser.serialize_field("name", &self.name)?;
        }
        if let Some(v) = self.cidrs.as_ref() {
            struct_ser.serialize_field("cidrs", v)?;
        }
        struct_ser.end()
    }
}
impl<'de> serde::Deserialize<'de> for ServiceCidr {
    #[allow(deprecated)]
    fn deserialize<D>(deserializer: D) -> std::result::Result<Self, D::Error>
    where
        D: serde::Deserializer<'de>,
    {
        const FIELDS: &[&str] = &[
            "name",
            "cidrs",
        ];

        #[allow(clippy::enum_variant_names)]
        enum GeneratedField {
            Name,
            Cidrs,
        }
        impl<'de> serde::Deserialize<'de> for GeneratedField {
            fn deserialize<D>(deserializer: D) -> std::result::Result<GeneratedField, D::Error>
            where
                D: serde::Deserializer<'de>,
            {
                struct GeneratedVisitor;

                impl serde::de::Visitor<'_> for GeneratedVisitor {
                    type Value = GeneratedField;

                    fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                        write!(formatter, "expected one of: {:?}", &FIELDS)
                    }

                    #[allow(unused_variables)]
                    fn visit_str<E>(self, value: &str) -> std::result::Result<GeneratedField, E>
                    where
                        E: serde::de::Error,
                    {
                        match value {
                            "name" => Ok(GeneratedField::Name),
                            "cidrs" => Ok(GeneratedField::Cidrs),
                            _ => Err(serde::de::Error::unknown_field(value, FIELDS)),
                        }
                    }
                }
                deserializer.deserialize_identifier(GeneratedVisitor)
            }
        }
        struct GeneratedVisitor;
        impl<'de> serde::de::Visitor<'de> for GeneratedVisitor {
            type Value = ServiceCidr;

            fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                formatter.write_str("struct kpng.model.v1.ServiceCidr")
            }

            fn visit_map<V>(self, mut map_: V) -> std::result::Result<ServiceCidr, V::Error>
                where
                    V: serde::de::MapAccess<'de>,
            {
                let mut name__ = None;
                let mut cidrs__ = None;
                while let Some(k) = map_.next_key()? {
                    match k {
                        GeneratedField::Name => {
                            if name__.is_some() {
                                return Err(serde::de::Error::duplicate_field("name"));
                            }
                            name__ = Some(map_.next_value()?);
                        }
                        GeneratedField::Cidrs => {
                            if cidrs__.is_some() {
                                return Err(serde::de::Error::duplicate_field("cidrs"));
                            }
                            cidrs__ = map_.next_value()?;
                        }
                    }
                }
                Ok(ServiceCidr {
                    name: name__.unwrap_or_default(),
                    cidrs: cidrs__,
                })
            }
        }
        deserializer.deserialize_struct("kpng.model.v1.ServiceCidr", FIELDS, GeneratedVisitor)
    }
}
impl serde::Serialize for ServicePort {
    #[allow(deprecated)]
    fn serialize<S>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error>
    where
        S: serde::Serializer,
    {
        use serde::ser::SerializeStruct;
        let mut len = 0;
        if !self.name.is_empty() {
            len += 1;
        }
        if self.protocol != 0 {
            len += 1;
        }
        if self.port != 0 {
            len += 1;
        }
        if self.node_port != 0 {
            len += 1;
        }
        if self.target_port.is_some() {
            len += 1;
        }
        let mut struct_ser = serializer.serialize_struct("kpng.model.v1.ServicePort", len)?;
        if !self.name.is_empty() {
            struct_ser.serialize_field("name", &self.name)?;
        }
        if self.protocol != 0 {
            let v = Protocol::try_from(self.protocol)
                .map_err(|_| serde::ser::Error::custom(format!("Invalid variant {}", self.protocol)))?;
            struct_ser.serialize_field("protocol", &v)?;
        }
        if self.port != 0 {
            struct_ser.serialize_field("port", &self.port)?;
        }
        if self.node_port != 0 {
            struct_ser.serialize_field("nodePort", &self.node_port)?;
        }
        if let Some(v) = self.target_port.as_ref() {
            match v {
                service_port::TargetPort::TargetPortNumber(v) => {
                    struct_ser.serialize_field("targetPortNumber", v)?;
                }
                service_port::TargetPort::TargetPortName(v) => {
                    struct_ser.serialize_field("targetPortName", v)?;
                }
            }
        }
        struct_ser.end()
    }
}
impl<'de> serde::Deserialize<'de> for ServicePort {
    #[allow(deprecated)]
    fn deserialize<D>(deserializer: D) -> std::result::Result<Self, D::Error>
    where
        D: serde::Deserializer<'de>,
    {
        const FIELDS: &[&str] = &[
            "name",
            "protocol",
            "port",
            "node_port",
            "nodePort",
            "target_port_number",
            "targetPortNumber",
            "target_port_name",
            "targetPortName",
        ];

        #[allow(clippy::enum_variant_names)]
        enum GeneratedField {
            Name,
            Protocol,
            Port,
            NodePort,
            TargetPortNumber,
            TargetPortName,
        }
        impl<'de> serde::Deserialize<'de> for GeneratedField {
            fn deserialize<D>(deserializer: D) -> std::result::Result<GeneratedField, D::Error>
            where
                D: serde::Deserializer<'de>,
            {
                struct GeneratedVisitor;

                impl serde::de::Visitor<'_> for GeneratedVisitor {
                    type Value = GeneratedField;

                    fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                        write!(formatter, "expected one of: {:?}", &FIELDS)
                    }

                    #[allow(unused_variables)]
                    fn visit_str<E>(self, value: &str) -> std::result::Result<GeneratedField, E>
                    where
                        E: serde::de::Error,
                    {
                        match value {
                            "name" => Ok(GeneratedField::Name),
                            "protocol" => Ok(GeneratedField::Protocol),
                            "port" => Ok(GeneratedField::Port),
                            "nodePort" | "node_port" => Ok(GeneratedField::NodePort),
                            "targetPortNumber" | "target_port_number" => Ok(GeneratedField::TargetPortNumber),
                            "targetPortName" | "target_port_name" => Ok(GeneratedField::TargetPortName),
                            _ => Err(serde::de::Error::unknown_field(value, FIELDS)),
                        }
                    }
                }
                deserializer.deserialize_identifier(GeneratedVisitor)
            }
        }
        struct GeneratedVisitor;
        impl<'de> serde::de::Visitor<'de> for GeneratedVisitor {
            type Value = ServicePort;

            fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                formatter.write_str("struct kpng.model.v1.ServicePort")
            }

            fn visit_map<V>(self, mut map_: V) -> std::result::Result<ServicePort, V::Error>
                where
                    V: serde::de::MapAccess<'de>,
            {
                let mut name__ = None;
                let mut protocol__ = None;
                let mut port__ = None;
                let mut node_port__ = None;
                let mut target_port__ = None;
                while let Some(k) = map_.next_key()? {
                    match k {
                        GeneratedField::Name => {
                            if name__.is_some() {
                                return Err(serde::de::Error::duplicate_field("name"));
                            }
                            name__ = Some(map_.next_value()?);
                        }
                        GeneratedField::Protocol => {
                            if protocol__.is_some() {
                                return Err(serde::de::Error::duplicate_field("protocol"));
                            }
                            protocol__ = Some(map_.next_value::<Protocol>()? as i32);
                        }
                        GeneratedField::Port => {
                            if port__.is_some() {
                                return Err(serde::de::Error::duplicate_field("port"));
                            }
                            port__ = 
                                Some(map_.next_value::<::pbjson::private::NumberDeserialize<_>>()?.0)
                            ;
                        }
                        GeneratedField::NodePort => {
                            if node_port__.is_some() {
                                return Err(serde::de::Error::duplicate_field("nodePort"));
                            }
                            node_port__ = 
                                Some(map_.next_value::<::pbjson::private::NumberDeserialize<_>>()?.0)
                            ;
                        }
                        GeneratedField::TargetPortNumber => {
                            if target_port__.is_some() {
                                return Err(serde::de::Error::duplicate_field("targetPortNumber"));
                            }
                            target_port__ = map_.next_value::<::std::option::Option<::pbjson::private::NumberDeserialize<_>>>()?.map(|x| service_port::TargetPort::TargetPortNumber(x.0));
                        }
                        GeneratedField::TargetPortName => {
                            if target_port__.is_some() {
                                return Err(serde::de::Error::duplicate_field("targetPortName"));
                            }
                            target_port__ = map_.next_value::<::std::option::Option<_>>()?.map(service_port::TargetPort::TargetPortName);
                        }
                    }
                }
                Ok(ServicePort {
                    name: name__.unwrap_or_default(),
                    protocol: protocol__.unwrap_or_default(),
                    port: port__.unwrap_or_default(),
                    node_port: node_port__.unwrap_or_default(),
                    target_port: target_port__,
                })
            }
        }
        deserializer.deserialize_struct("kpng.model.v1.ServicePort", FIELDS, GeneratedVisitor)
    }
}
impl serde::Serialize for ServiceRef {
    #[allow(deprecated)]
    fn serialize<S>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error>
    where
        S: serde::Serializer,
    {
        use serde::ser::SerializeStruct;
        let mut len = 0;
        if !self.namespace.is_empty() {
            len += 1;
        }
        if !self.name.is_empty() {
            len += 1;
        }
        let mut struct_ser = serializer.serialize_struct("kpng.model.v1.ServiceRef", len)?;
        if !self.namespace.is_empty() {
            struct_ser.serialize_field("namespace", &self.namespace)?;
        }
        if !self.name.is_empty() {
            struct_ser.serialize_field("name", &self.name)?;
        }
        struct_ser.end()
    }
}
impl<'de> serde::Deserialize<'de> for ServiceRef {
    #[allow(deprecated)]
    fn deserialize<D>(deserializer: D) -> std::result::Result<Self, D::Error>
    where
        D: serde::Deserializer<'de>,
    {
        const FIELDS: &[&str] = &[
            "namespace",
            "name",
        ];

        #[allow(clippy::enum_variant_names)]
        enum GeneratedField {
            Namespace,
            Name,
        }
        impl<'de> serde::Deserialize<'de> for GeneratedField {
            fn deserialize<D>(deserializer: D) -> std::result::Result<GeneratedField, D::Error>
            where
                D: serde::Deserializer<'de>,
            {
                struct GeneratedVisitor;

                impl serde::de::Visitor<'_> for GeneratedVisitor {
                    type Value = GeneratedField;

                    fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                        write!(formatter, "expected one of: {:?}", &FIELDS)
                    }

                    #[allow(unused_variables)]
                    fn visit_str<E>(self, value: &str) -> std::result::Result<GeneratedField, E>
                    where
                        E: serde::de::Error,
                    {
                        match value {
                            "namespace" => Ok(GeneratedField::Namespace),
                            "name" => Ok(GeneratedField::Name),
                            _ => Err(serde::de::Error::unknown_field(value, FIELDS)),
                        }
                    }
                }
                deserializer.deserialize_identifier(GeneratedVisitor)
            }
        }
        struct GeneratedVisitor;
        impl<'de> serde::de::Visitor<'de> for GeneratedVisitor {
            type Value = ServiceRef;

            fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                formatter.write_str("struct kpng.model.v1.ServiceRef")
            }

            fn visit_map<V>(self, mut map_: V) -> std::result::Result<ServiceRef, V::Error>
                where
                    V: serde::de::MapAccess<'de>,
            {
                let mut namespace__ = None;
                let mut name__ = None;
                while let Some(k) = map_.next_key()? {
                    match k {
                        GeneratedField::Namespace => {
                            if namespace__.is_some() {
                                return Err(serde::de::Error::duplicate_field("namespace"));
                            }
                            namespace__ = Some(map_.next_value()?);
                        }
                        GeneratedField::Name => {
                            if name__.is_some() {
                                return Err(serde::de::Error::duplicate_field("name"));
                            }
                            name__ = Some(map_.next_value()?);
                        }
                    }
                }
                Ok(ServiceRef {
                    namespace: namespace__.unwrap_or_default(),
                    name: name__.unwrap_or_default(),
                })
            }
        }
        deserializer.deserialize_struct("kpng.model.v1.ServiceRef", FIELDS, GeneratedVisitor)
    }
}
impl serde::Serialize for ServiceType {
    #[allow(deprecated)]
    fn serialize<S>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error>
    where
        S: serde::Serializer,
    {
        let variant = match self {
            Self::Unspecified => "SERVICE_TYPE_UNSPECIFIED",
            Self::ClusterIp => "SERVICE_TYPE_CLUSTER_IP",
            Self::NodePort => "SERVICE_TYPE_NODE_PORT",
            Self::LoadBalancer => "SERVICE_TYPE_LOAD_BALANCER",
        };
        serializer.serialize_str(variant)
    }
}
impl<'de> serde::Deserialize<'de> for ServiceType {
    #[allow(deprecated)]
    fn deserialize<D>(deserializer: D) -> std::result::Result<Self, D::Error>
    where
        D: serde::Deserializer<'de>,
    {
        const FIELDS: &[&str] = &[
            "SERVICE_TYPE_UNSPECIFIED",
            "SERVICE_TYPE_CLUSTER_IP",
            "SERVICE_TYPE_NODE_PORT",
            "SERVICE_TYPE_LOAD_BALANCER",
        ];

        struct GeneratedVisitor;

        impl serde::de::Visitor<'_> for GeneratedVisitor {
            type Value = ServiceType;

            fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(formatter, "expected one of: {:?}", &FIELDS)
            }

            fn visit_i64<E>(self, v: i64) -> std::result::Result<Self::Value, E>
            where
                E: serde::de::Error,
            {
                i32::try_from(v)
                    .ok()
                    .and_then(|x| x.try_into().ok())
                    .ok_or_else(|| {
                        serde::de::Error::invalid_value(serde::de::Unexpected::Signed(v), &self)
                    })
            }

            fn visit_u64<E>(self, v: u64) -> std::result::Result<Self::Value, E>
            where
                E: serde::de::Error,
            {
                i32::try_from(v)
                    .ok()
                    .and_then(|x| x.try_into().ok())
                    .ok_or_else(|| {
                        serde::de::Error::invalid_value(serde::de::Unexpected::Unsigned(v), &self)
                    })
            }

            fn visit_str<E>(self, value: &str) -> std::result::Result<Self::Value, E>
            where
                E: serde::de::Error,
            {
                match value {
                    "SERVICE_TYPE_UNSPECIFIED" => Ok(ServiceType::Unspecified),
                    "SERVICE_TYPE_CLUSTER_IP" => Ok(ServiceType::ClusterIp),
                    "SERVICE_TYPE_NODE_PORT" => Ok(ServiceType::NodePort),
                    "SERVICE_TYPE_LOAD_BALANCER" => Ok(ServiceType::LoadBalancer),
                    _ => Err(serde::de::Error::unknown_variant(value, FIELDS)),
                }
            }
        }
        deserializer.deserialize_any(GeneratedVisitor)
    }
}
impl serde::Serialize for SetEndpoint {
    #[allow(deprecated)]
    fn serialize<S>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error>
    where
        S: serde::Serializer,
    {
        use serde::ser::SerializeStruct;
        let mut len = 0;
        if self.service.is_some() {
            len += 1;
        }
        if self.endpoint.is_some() {
            len += 1;
        }
        let mut struct_ser = serializer.serialize_struct("kpng.model.v1.SetEndpoint", len)?;
        if let Some(v) = self.service.as_ref() {
            struct_ser.serialize_field("service", v)?;
        }
        if let Some(v) = self.endpoint.as_ref() {
            struct_ser.serialize_field("endpoint", v)?;
        }
        struct_ser.end()
    }
}
impl<'de> serde::Deserialize<'de> for SetEndpoint {
    #[allow(deprecated)]
    fn deserialize<D>(deserializer: D) -> std::result::Result<Self, D::Error>
    where
        D: serde::Deserializer<'de>,
    {
        const FIELDS: &[&str] = &[
            "service",
            "endpoint",
        ];

        #[allow(clippy::enum_variant_names)]
        enum GeneratedField {
            Service,
            Endpoint,
        }
        impl<'de> serde::Deserialize<'de> for GeneratedField {
            fn deserialize<D>(deserializer: D) -> std::result::Result<GeneratedField, D::Error>
            where
                D: serde::Deserializer<'de>,
            {
                struct GeneratedVisitor;

                impl serde::de::Visitor<'_> for GeneratedVisitor {
                    type Value = GeneratedField;

                    fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                        write!(formatter, "expected one of: {:?}", &FIELDS)
                    }

                    #[allow(unused_variables)]
                    fn visit_str<E>(self, value: &str) -> std::result::Result<GeneratedField, E>
                    where
                        E: serde::de::Error,
                    {
                        match value {
                            "service" => Ok(GeneratedField::Service),
                            "endpoint" => Ok(GeneratedField::Endpoint),
                            _ => Err(serde::de::Error::unknown_field(value, FIELDS)),
                        }
                    }
                }
                deserializer.deserialize_identifier(GeneratedVisitor)
            }
        }
        struct GeneratedVisitor;
        impl<'de> serde::de::Visitor<'de> for GeneratedVisitor {
            type Value = SetEndpoint;

            fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                formatter.write_str("struct kpng.model.v1.SetEndpoint")
            }

            fn visit_map<V>(self, mut map_: V) -> std::result::Result<SetEndpoint, V::Error>
                where
                    V: serde::de::MapAccess<'de>,
            {
                let mut service__ = None;
                let mut endpoint__ = None;
                while let Some(k) = map_.next_key()? {
                    match k {
                        GeneratedField::Service => {
                            if service__.is_some() {
                                return Err(serde::de::Error::duplicate_field("service"));
                            }
                            service__ = map_.next_value()?;
                        }
                        GeneratedField::Endpoint => {
                            if endpoint__.is_some() {
                                return Err(serde::de::Error::duplicate_field("endpoint"));
                            }
                            endpoint__ = map_.next_value()?;
                        }
                    }
                }
                Ok(SetEndpoint {
                    service: service__,
                    endpoint: endpoint__,
                })
            }
        }
        deserializer.deserialize_struct("kpng.model.v1.SetEndpoint", FIELDS, GeneratedVisitor)
    }
}
impl serde::Serialize for SetEndpoints {
    #[allow(deprecated)]
    fn serialize<S>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error>
    where
        S: serde::Serializer,
    {
        use serde::ser::SerializeStruct;
        let mut len = 0;
        if self.service.is_some() {
            len += 1;
        }
        if !self.endpoints.is_empty() {
            len += 1;
        }
        if self.columns.is_some() {
            len += 1;
        }
        let mut struct_ser = serializer.serialize_struct("kpng.model.v1.SetEndpoints", len)?;
        if let Some(v) = self.service.as_ref() {
            struct_ser.serialize_field("service", v)?;
        }
        if !self.endpoints.is_empty() {
            struct_ser.serialize_field("endpoints", &self.endpoints)?;
        }
        if let Some(v) = self.columns.as_ref() {
            struct_ser.serialize_field("columns", v)?;
        }
        struct_ser.end()
    }
}
impl<'de> serde::Deserialize<'de> for SetEndpoints {
    #[allow(deprecated)]
    fn deserialize<D>(deserializer: D) -> std::result::Result<Self, D::Error>
    where
        D: serde::Deserializer<'de>,
    {
        const FIELDS: &[&str] = &[
            "service",
            "endpoints",
            "columns",
        ];

        #[allow(clippy::enum_variant_names)]
        enum GeneratedField {
            Service,
            Endpoints,
            Columns,
        }
        impl<'de> serde::Deserialize<'de> for GeneratedField {
            fn deserialize<D>(deserializer: D) -> std::result::Result<GeneratedField, D::Error>
            where
                D: serde::Deserializer<'de>,
            {
                struct GeneratedVisitor;

                impl serde::de::Visitor<'_> for GeneratedVisitor {
                    type Value = GeneratedField;

                    fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                        write!(formatter, "expected one of: {:?}", &FIELDS)
                    }

                    #[allow(unused_variables)]
                    fn visit_str<E>(self, value: &str) -> std::result::Result<GeneratedField, E>
                    where
                        E: serde::de::Error,
                    {
                        match value {
                            "service" => Ok(GeneratedField::Service),
                            "endpoints" => Ok(GeneratedField::Endpoints),
                            "columns" => Ok(GeneratedField::Columns),
                            _ => Err(serde::de::Error::unknown_field(value, FIELDS)),
                        }
                    }
                }
                deserializer.deserialize_identifier(GeneratedVisitor)
            }
        }
        struct GeneratedVisitor;
        impl<'de> serde::de::Visitor<'de> for GeneratedVisitor {
            type Value = SetEndpoints;

            fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                formatter.write_str("struct kpng.model.v1.SetEndpoints")
            }

            fn visit_map<V>(self, mut map_: V) -> std::result::Result<SetEndpoints, V::Error>
                where
                    V: serde::de::MapAccess<'de>,
            {
                let mut service__ = None;
                let mut endpoints__ = None;
                let mut columns__ = None;
                while let Some(k) = map_.next_key()? {
                    match k {
                        GeneratedField::Service => {
                            if service__.is_some() {
                                return Err(serde::de::Error::duplicate_field("service"));
                            }
                            service__ = map_.next_value()?;
                        }
                        GeneratedField::Endpoints => {
                            if endpoints__.is_some() {
                                return Err(serde::de::Error::duplicate_field("endpoints"));
                            }
                            endpoints__ = Some(map_.next_value()?);
                        }
                        GeneratedField::Columns => {
                            if columns__.is_some() {
                                return Err(serde::de::Error::duplicate_field("columns"));
                            }
                            columns__ = map_.next_value()?;
                        }
                    }
                }
                Ok(SetEndpoints {
                    service: service__,
                    endpoints: endpoints__.unwrap_or_default(),
                    columns: columns__,
                })
            }
        }
        deserializer.deserialize_struct("kpng.model.v1.SetEndpoints", FIELDS, GeneratedVisitor)
    }
}
impl serde::Serialize for TrafficPolicy {
    #[allow(deprecated)]
    fn serialize<S>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error>
    where
        S: serde::Serializer,
    {
        let variant = match self {
            Self::Cluster => "TRAFFIC_POLICY_CLUSTER",
            Self::Local => "TRAFFIC_POLICY_LOCAL",
        };
        serializer.serialize_str(variant)
    }
}
impl<'de> serde::Deserialize<'de> for TrafficPolicy {
    #[allow(deprecated)]
    fn deserialize<D>(deserializer: D) -> std::result::Result<Self, D::Error>
    where
        D: serde::Deserializer<'de>,
    {
        const FIELDS: &[&str] = &[
            "TRAFFIC_POLICY_CLUSTER",
            "TRAFFIC_POLICY_LOCAL",
        ];

        struct GeneratedVisitor;

        impl serde::de::Visitor<'_> for GeneratedVisitor {
            type Value = TrafficPolicy;

            fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(formatter, "expected one of: {:?}", &FIELDS)
            }

            fn visit_i64<E>(self, v: i64) -> std::result::Result<Self::Value, E>
            where
                E: serde::de::Error,
            {
                i32::try_from(v)
                    .ok()
                    .and_then(|x| x.try_into().ok())
                    .ok_or_else(|| {
                        serde::de::Error::invalid_value(serde::de::Unexpected::Signed(v), &self)
                    })
            }

            fn visit_u64<E>(self, v: u64) -> std::result::Result<Self::Value, E>
            where
                E: serde::de::Error,
            {
                i32::try_from(v)
                    .ok()
                    .and_then(|x| x.try_into().ok())
                    .ok_or_else(|| {
                        serde::de::Error::invalid_value(serde::de::Unexpected::Unsigned(v), &self)
                    })
            }

            fn visit_str<E>(self, value: &str) -> std::result::Result<Self::Value, E>
            where
                E: serde::de::Error,
            {
                match value {
                    "TRAFFIC_POLICY_CLUSTER" => Ok(TrafficPolicy::Cluster),
                    "TRAFFIC_POLICY_LOCAL" => Ok(TrafficPolicy::Local),
                    _ => Err(serde::de::Error::unknown_variant(value, FIELDS)),
                }
            }
        }
        deserializer.deserialize_any(GeneratedVisitor)
    }
}
impl serde::Serialize for ViewChange {
    #[allow(deprecated)]
    fn serialize<S>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error>
    where
        S: serde::Serializer,
    {
        use serde::ser::SerializeStruct;
        let mut len = 0;
        if self.change.is_some() {
            len += 1;
        }
        let mut struct_ser = serializer.serialize_struct("kpng.model.v1.ViewChange", len)?;
        if let Some(v) = self.change.as_ref() {
            match v {
                view_change::Change::SetNode(v) => {
                    struct_ser.serialize_field("setNode", v)?;
                }
                view_change::Change::DeleteNode(v) => {
                    struct_ser.serialize_field("deleteNode", v)?;
                }
                view_change::Change::SetService(v) => {
                    struct_ser.serialize_field("setService", v)?;
                }
                view_change::Change::DeleteService(v) => {
                    struct_ser.serialize_field("deleteService", v)?;
                }
                view_change::Change::SetEndpoint(v) => {
                    struct_ser.serialize_field("setEndpoint", v)?;
                }
                view_change::Change::DeleteEndpoint(v) => {
                    struct_ser.serialize_field("deleteEndpoint", v)?;
                }
                view_change::Change::SetEndpoints(v) => {
                    struct_ser.serialize_field("setEndpoints", v)?;
                }
                view_change::Change::SetServiceCidrs(v) => {
                    struct_ser.serialize_field("setServiceCidrs", v)?;
                }
            }
        }
        struct_ser.end()
    }
}
impl<'de> serde::Deserialize<'de> for ViewChange {
    #[allow(deprecated)]
    fn deserialize<D>(deserializer: D) -> std::result::Result<Self, D::Error>
    where
        D: serde::Deserializer<'de>,
    {
        const FIELDS: &[&str] = &[
            "set_node",
            "setNode",
            "delete_node",
            "deleteNode",
            "set_service",
            "setService",
            "delete_service",
            "deleteService",
            "set_endpoint",
            "setEndpoint",
            "delete_endpoint",
            "deleteEndpoint",
            "set_endpoints",
            "setEndpoints",
            "set_service_cidrs",
            "setServiceCidrs",
        ];

        #[allow(clippy::enum_variant_names)]
        enum GeneratedField {
            SetNode,
            DeleteNode,
            SetService,
            DeleteService,
            SetEndpoint,
            DeleteEndpoint,
            SetEndpoints,
            SetServiceCidrs,
        }
        impl<'de> serde::Deserialize<'de> for GeneratedField {
            fn deserialize<D>(deserializer: D) -> std::result::Result<GeneratedField, D::Error>
            where
                D: serde::Deserializer<'de>,
            {
                struct GeneratedVisitor;

                impl serde::de::Visitor<'_> for GeneratedVisitor {
                    type Value = GeneratedField;

                    fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                        write!(formatter, "expected one of: {:?}", &FIELDS)
                    }

                    #[allow(unused_variables)]
                    fn visit_str<E>(self, value: &str) -> std::result::Result<GeneratedField, E>
                    where
                        E: serde::de::Error,
                    {
                        match value {
                            "setNode" | "set_node" => Ok(GeneratedField::SetNode),
                            "deleteNode" | "delete_node" => Ok(GeneratedField::DeleteNode),
                            "setService" | "set_service" => Ok(GeneratedField::SetService),
                            "deleteService" | "delete_service" => Ok(GeneratedField::DeleteService),
                            "setEndpoint" | "set_endpoint" => Ok(GeneratedField::SetEndpoint),
                            "deleteEndpoint" | "delete_endpoint" => Ok(GeneratedField::DeleteEndpoint),
                            "setEndpoints" | "set_endpoints" => Ok(GeneratedField::SetEndpoints),
                            "setServiceCidrs" | "set_service_cidrs" => Ok(GeneratedField::SetServiceCidrs),
                            _ => Err(serde::de::Error::unknown_field(value, FIELDS)),
                        }
                    }
                }
                deserializer.deserialize_identifier(GeneratedVisitor)
            }
        }
        struct GeneratedVisitor;
        impl<'de> serde::de::Visitor<'de> for GeneratedVisitor {
            type Value = ViewChange;

            fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                formatter.write_str("struct kpng.model.v1.ViewChange")
            }

            fn visit_map<V>(self, mut map_: V) -> std::result::Result<ViewChange, V::Error>
                where
                    V: serde::de::MapAccess<'de>,
            {
                let mut change__ = None;
                while let Some(k) = map_.next_key()? {
                    match k {
                        GeneratedField::SetNode => {
                            if change__.is_some() {
                                return Err(serde::de::Error::duplicate_field("setNode"));
                            }
                            change__ = map_.next_value::<::std::option::Option<_>>()?.map(view_change::Change::SetNode)
;
                        }
                        GeneratedField::DeleteNode => {
                            if change__.is_some() {
                                return Err(serde::de::Error::duplicate_field("deleteNode"));
                            }
                            change__ = map_.next_value::<::std::option::Option<_>>()?.map(view_change::Change::DeleteNode);
                        }
                        GeneratedField::SetService => {
                            if change__.is_some() {
                                return Err(serde::de::Error::duplicate_field("setService"));
                            }
                            change__ = map_.next_value::<::std::option::Option<_>>()?.map(view_change::Change::SetService)
;
                        }
                        GeneratedField::DeleteService => {
                            if change__.is_some() {
                                return Err(serde::de::Error::duplicate_field("deleteService"));
                            }
                            change__ = map_.next_value::<::std::option::Option<_>>()?.map(view_change::Change::DeleteService)
;
                        }
                        GeneratedField::SetEndpoint => {
                            if change__.is_some() {
                                return Err(serde::de::Error::duplicate_field("setEndpoint"));
                            }
                            change__ = map_.next_value::<::std::option::Option<_>>()?.map(view_change::Change::SetEndpoint)
;
                        }
                        GeneratedField::DeleteEndpoint => {
                            if change__.is_some() {
                                return Err(serde::de::Error::duplicate_field("deleteEndpoint"));
                            }
                            change__ = map_.next_value::<::std::option::Option<_>>()?.map(view_change::Change::DeleteEndpoint)
;
                        }
                        GeneratedField::SetEndpoints => {
                            if change__.is_some() {
                                return Err(serde::de::Error::duplicate_field("setEndpoints"));
                            }
                            change__ = map_.next_value::<::std::option::Option<_>>()?.map(view_change::Change::SetEndpoints)
;
                        }
                        GeneratedField::SetServiceCidrs => {
                            if change__.is_some() {
                                return Err(serde::de::Error::duplicate_field("setServiceCidrs"));
                            }
                            change__ = map_.next_value::<::std::option::Option<_>>()?.map(view_change::Change::SetServiceCidrs)
;
                        }
                    }
                }
                Ok(ViewChange {
                    change: change__,
                })
            }
        }
        deserializer.deserialize_struct("kpng.model.v1.ViewChange", FIELDS, GeneratedVisitor)
    }
}
impl serde::Serialize for ViewChanges {
    #[allow(deprecated)]
    fn serialize<S>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error>
    where
        S: serde::Serializer,
    {
        use serde::ser::SerializeStruct;
        let mut len = 0;
        if !self.changes.is_empty() {
            len += 1;
        }
        if !self.strings.is_empty() {
            len += 1;
        }
        if !self.port_lists.is_empty() {
            len += 1;
        }
        let mut struct_ser = serializer.serialize_struct("kpng.model.v1.ViewChanges", len)?;
        if !self.changes.is_empty() {
            struct_ser.serialize_field("changes", &self.changes)?;
        }
        if !self.strings.is_empty() {
            struct_ser.serialize_field("strings", &self.strings)?;
        }
        if !self.port_lists.is_empty() {
            struct_ser.serialize_field("portLists", &self.port_lists)?;
        }
        struct_ser.end()
    }
}
impl<'de> serde::Deserialize<'de> for ViewChanges {
    #[allow(deprecated)]
    fn deserialize<D>(deserializer: D) -> std::result::Result<Self, D::Error>
    where
        D: serde::Deserializer<'de>,
    {
        const FIELDS: &[&str] = &[
            "changes",
            "strings",
            "port_lists",
            "portLists",
        ];

        #[allow(clippy::enum_variant_names)]
        enum GeneratedField {
            Changes,
            Strings,
            PortLists,
        }
        impl<'de> serde::Deserialize<'de> for GeneratedField {
            fn deserialize<D>(deserializer: D) -> std::result::Result<GeneratedField, D::Error>
            where
                D: serde::Deserializer<'de>,
            {
                struct GeneratedVisitor;

                impl serde::de::Visitor<'_> for GeneratedVisitor {
                    type Value = GeneratedField;

                    fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                        write!(formatter, "expected one of: {:?}", &FIELDS)
                    }

                    #[allow(unused_variables)]
                    fn visit_str<E>(self, value: &str) -> std::result::Result<GeneratedField, E>
                    where
                        E: serde::de::Error,
                    {
                        match value {
                            "changes" => Ok(GeneratedField::Changes),
                            "strings" => Ok(GeneratedField::Strings),
                            "portLists" | "port_lists" => Ok(GeneratedField::PortLists),
                            _ => Err(serde::de::Error::unknown_field(value, FIELDS)),
                        }
                    }
                }
                deserializer.deserialize_identifier(GeneratedVisitor)
            }
        }
        struct GeneratedVisitor;
        impl<'de> serde::de::Visitor<'de> for GeneratedVisitor {
            type Value = ViewChanges;

            fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                formatter.write_str("struct kpng.model.v1.ViewChanges")
            }

            fn visit_map<V>(self, mut map_: V) -> std::result::Result<ViewChanges, V::Error>
                where
                    V: serde::de::MapAccess<'de>,
            {
                let mut changes__ = None;
                let mut strings__ = None;
                let mut port_lists__ = None;
                while let Some(k) = map_.next_key()? {
                    match k {
                        GeneratedField::Changes => {
                            if changes__.is_some() {
                                return Err(serde::de::Error::duplicate_field("changes"));
                            }
                            changes__ = Some(map_.next_value()?);
                        }
                        GeneratedField::Strings => {
                            if strings__.is_some() {
                                return Err(serde::de::Error::duplicate_field("strings"));
                            }
                            strings__ = Some(map_.next_value()?);
                        }
                        GeneratedField::PortLists => {
                            if port_lists__.is_some() {
                                return Err(serde::de::Error::duplicate_field("portLists"));
                            }
                            port_lists__ = Some(map_.next_value()?);
                        }
                    }
                }
                Ok(ViewChanges {
                    changes: changes__.unwrap_or_default(),
                    strings: strings__.unwrap_or_default(),
                    port_lists: port_lists__.unwrap_or_default(),
                })
            }
        }
        deserializer.deserialize_struct("kpng.model.v1.ViewChanges", FIELDS, GeneratedVisitor)
    }
}
impl serde::Serialize for ViewSummary {
    #[allow(deprecated)]
    fn serialize<S>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error>
    where
        S: serde::Serializer,
    {
        use serde::ser::SerializeStruct;
        let mut len = 0;
        if !self.services.is_empty() {
            len += 1;
        }
        if self.node != 0 {
            len += 1;
        }
        if self.service_cidrs != 0 {
            len += 1;
        }
        let mut struct_ser = serializer.serialize_struct("kpng.model.v1.ViewSummary", len)?;
        if !self.services.is_empty() {
            #[allow(clippy::needless_borrow)]
            #[allow(clippy::needless_borrows_for_generic_args)]
            struct_ser.serialize_field("services", pbjson::private::base64::encode(&self.services).as_str())?;
        }
        if self.node != 0 {
            #[allow(clippy::needless_borrow)]
            #[allow(clippy::needless_borrows_for_generic_args)]
            struct_ser.serialize_field("node", ToString::to_string(&self.node).as_str())?;
        }
        if self.service_cidrs != 0 {
            #[allow(clippy::needless_borrow)]
            #[allow(clippy::needless_borrows_for_generic_args)]
            struct_ser.serialize_field("serviceCidrs", ToString::to_string(&self.service_cidrs).as_str())?;
        }
        struct_ser.end()
    }
}
impl<'de> serde::Deserialize<'de> for ViewSummary {
    #[allow(deprecated)]
    fn deserialize<D>(deserializer: D) -> std::result::Result<Self, D::Error>
    where
        D: serde::Deserializer<'de>,
    {
        const FIELDS: &[&str] = &[
            "services",
            "node",
            "service_cidrs",
            "serviceCidrs",
        ];

        #[allow(clippy::enum_variant_names)]
        enum GeneratedField {
            Services,
            Node,
            ServiceCidrs,
        }
        impl<'de> serde::Deserialize<'de> for GeneratedField {
            fn deserialize<D>(deserializer: D) -> std::result::Result<GeneratedField, D::Error>
            where
                D: serde::Deserializer<'de>,
            {
                struct GeneratedVisitor;

                impl serde::de::Visitor<'_> for GeneratedVisitor {
                    type Value = GeneratedField;

                    fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                        write!(formatter, "expected one of: {:?}", &FIELDS)
                    }

                    #[allow(unused_variables)]
                    fn visit_str<E>(self, value: &str) -> std::result::Result<GeneratedField, E>
                    where
                        E: serde::de::Error,
                    {
                        match value {
                            "services" => Ok(GeneratedField::Services),
                            "node" => Ok(GeneratedField::Node),
                            "serviceCidrs" | "service_cidrs" => Ok(GeneratedField::ServiceCidrs),
                            _ => Err(serde::de::Error::unknown_field(value, FIELDS)),
                        }
                    }
                }
                deserializer.deserialize_identifier(GeneratedVisitor)
            }
        }
        struct GeneratedVisitor;
        impl<'de> serde::de::Visitor<'de> for GeneratedVisitor {
            type Value = ViewSummary;

            fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                formatter.write_str("struct kpng.model.v1.ViewSummary")
            }

            fn visit_map<V>(self, mut map_: V) -> std::result::Result<ViewSummary, V::Error>
                where
                    V: serde::de::MapAccess<'de>,
            {
                let mut services__ = None;
                let mut node__ = None;
                let mut service_cidrs__ = None;
                while let Some(k) = map_.next_key()? {
                    match k {
                        GeneratedField::Services => {
                            if services__.is_some() {
                                return Err(serde::de::Error::duplicate_field("services"));
                            }
                            services__ = 
                                Some(map_.next_value::<::pbjson::private::BytesDeserialize<_>>()?.0)
                            ;
                        }
                        GeneratedField::Node => {
                            if node__.is_some() {
                                return Err(serde::de::Error::duplicate_field("node"));
                            }
                            node__ = 
                                Some(map_.next_value::<::pbjson::private::NumberDeserialize<_>>()?.0)
                            ;
                        }
                        GeneratedField::ServiceCidrs => {
                            if service_cidrs__.is_some() {
                                return Err(serde::de::Error::duplicate_field("serviceCidrs"));
                            }
                            service_cidrs__ = 
                                Some(map_.next_value::<::pbjson::private::NumberDeserialize<_>>()?.0)
                            ;
                        }
                    }
                }
                Ok(ViewSummary {
                    services: services__.unwrap_or_default(),
                    node: node__.unwrap_or_default(),
                    service_cidrs: service_cidrs__.unwrap_or_default(),
                })
            }
        }
        deserializer.deserialize_struct("kpng.model.v1.ViewSummary", FIELDS, GeneratedVisitor)
    }
}
impl serde::Serialize for WatchEvent {
    #[allow(deprecated)]
    fn serialize<S>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error>
    where
        S: serde::Serializer,
    {
        use serde::ser::SerializeStruct;
        let mut len = 0;
        if self.event.is_some() {
            len += 1;
        }
        let mut struct_ser = serializer.serialize_struct("kpng.model.v1.WatchEvent", len)?;
        if let Some(v) = self.event.as_ref() {
            match v {
                watch_event::Event::Reset(v) => {
                    struct_ser.serialize_field("reset", v)?;
                }
                watch_event::Event::Changes(v) => {
                    struct_ser.serialize_field("changes", v)?;
                }
                watch_event::Event::Sync(v) => {
                    #[allow(clippy::needless_borrow)]
                    #[allow(clippy::needless_borrows_for_generic_args)]
                    struct_ser.serialize_field("sync", ToString::to_string(&v).as_str())?;
                }
                watch_event::Event::Instance(v) => {
                    #[allow(clippy::needless_borrow)]
                    #[allow(clippy::needless_borrows_for_generic_args)]
                    struct_ser.serialize_field("instance", ToString::to_string(&v).as_str())?;
                }
                watch_event::Event::Digest(v) => {
                    #[allow(clippy::needless_borrow)]
                    #[allow(clippy::needless_borrows_for_generic_args)]
                    struct_ser.serialize_field("digest", pbjson::private::base64::encode(&v).as_str())?;
                }
                watch_event::Event::SummaryWanted(v) => {
                    struct_ser.serialize_field("summaryWanted", v)?;
                }
                watch_event::Event::Dropped(v) => {
                    struct_ser.serialize_field("dropped", v)?;
                }
            }
        }
        struct_ser.end()
    }
}
impl<'de> serde::Deserialize<'de> for WatchEvent {
    #[allow(deprecated)]
    fn deserialize<D>(deserializer: D) -> std::result::Result<Self, D::Error>
    where
        D: serde::Deserializer<'de>,
    {
        const FIELDS: &[&str] = &[
            "reset",
            "changes",
            "sync",
            "instance",
            "digest",
            "summary_wanted",
            "summaryWanted",
            "dropped",
        ];

        #[allow(clippy::enum_variant_names)]
        enum GeneratedField {
            Reset,
            Changes,
            Sync,
            Instance,
            Digest,
            SummaryWanted,
            Dropped,
        }
        impl<'de> serde::Deserialize<'de> for GeneratedField {
            fn deserialize<D>(deserializer: D) -> std::result::Result<GeneratedField, D::Error>
            where
                D: serde::Deserializer<'de>,
            {
                struct GeneratedVisitor;

                impl serde::de::Visitor<'_> for GeneratedVisitor {
                    type Value = GeneratedField;

                    fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                        write!(formatter, "expected one of: {:?}", &FIELDS)
                    }

                    #[allow(unused_variables)]
                    fn visit_str<E>(self, value: &str) -> std::result::Result<GeneratedField, E>
                    where
                        E: serde::de::Error,
                    {
                        match value {
                            "reset" => Ok(GeneratedField::Reset),
                            "changes" => Ok(GeneratedField::Changes),
                            "sync" => Ok(GeneratedField::Sync),
                            "instance" => Ok(GeneratedField::Instance),
                            "digest" => Ok(GeneratedField::Digest),
                            "summaryWanted" | "summary_wanted" => Ok(GeneratedField::SummaryWanted),
                            "dropped" => Ok(GeneratedField::Dropped),
                            _ => Err(serde::de::Error::unknown_field(value, FIELDS)),
                        }
                    }
                }
                deserializer.deserialize_identifier(GeneratedVisitor)
            }
        }
        struct GeneratedVisitor;
        impl<'de> serde::de::Visitor<'de> for GeneratedVisitor {
            type Value = WatchEvent;

            fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                formatter.write_str("struct kpng.model.v1.WatchEvent")
            }

            fn visit_map<V>(self, mut map_: V) -> std::result::Result<WatchEvent, V::Error>
                where
                    V: serde::de::MapAccess<'de>,
            {
                let mut event__ = None;
                while let Some(k) = map_.next_key()? {
                    match k {
                        GeneratedField::Reset => {
                            if event__.is_some() {
                                return Err(serde::de::Error::duplicate_field("reset"));
                            }
                            event__ = map_.next_value::<::std::option::Option<_>>()?.map(watch_event::Event::Reset);
                        }
                        GeneratedField::Changes => {
                            if event__.is_some() {
                                return Err(serde::de::Error::duplicate_field("changes"));
                            }
                            event__ = map_.next_value::<::std::option::Option<_>>()?.map(watch_event::Event::Changes)
;
                        }
                        GeneratedField::Sync => {
                            if event__.is_some() {
                                return Err(serde::de::Error::duplicate_field("sync"));
                            }
                            event__ = map_.next_value::<::std::option::Option<::pbjson::private::NumberDeserialize<_>>>()?.map(|x| watch_event::Event::Sync(x.0));
                        }
                        GeneratedField::Instance => {
                            if event__.is_some() {
                                return Err(serde::de::Error::duplicate_field("instance"));
                            }
                            event__ = map_.next_value::<::std::option::Option<::pbjson::private::NumberDeserialize<_>>>()?.map(|x| watch_event::Event::Instance(x.0));
                        }
                        GeneratedField::Digest => {
                            if event__.is_some() {
                                return Err(serde::de::Error::duplicate_field("digest"));
                            }
                            event__ = map_.next_value::<::std::option::Option<::pbjson::private::BytesDeserialize<_>>>()?.map(|x| watch_event::Event::Digest(x.0));
                        }
                        GeneratedField::SummaryWanted => {
                            if event__.is_some() {
                                return Err(serde::de::Error::duplicate_field("summaryWanted"));
                            }
                            event__ = map_.next_value::<::std::option::Option<_>>()?.map(watch_event::Event::SummaryWanted);
                        }
                        GeneratedField::Dropped => {
                            if event__.is_some() {
                                return Err(serde::de::Error::duplicate_field("dropped"));
                            }
                            event__ = map_.next_value::<::std::option::Option<_>>()?.map(watch_event::Event::Dropped)
;
                        }
                    }
                }
                Ok(WatchEvent {
                    event: event__,
                })
            }
        }
        deserializer.deserialize_struct("kpng.model.v1.WatchEvent", FIELDS, GeneratedVisitor)
    }
}
impl serde::Serialize for WatchRequest {
    #[allow(deprecated)]
    fn serialize<S>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error>
    where
        S: serde::Serializer,
    {
        use serde::ser::SerializeStruct;
        let mut len = 0;
        if !self.node.is_empty() {
            len += 1;
        }
        if self.since_revision != 0 {
            len += 1;
        }
        if self.since_instance != 0 {
            len += 1;
        }
        if !self.since_digest.is_empty() {
            len += 1;
        }
        if self.endpoint_columns {
            len += 1;
        }
        if self.summarizes {
            len += 1;
        }
        if self.since_summary.is_some() {
            len += 1;
        }
        if self.unavailable_unless_synced {
            len += 1;
        }
        let mut struct_ser = serializer.serialize_struct("kpng.model.v1.WatchRequest", len)?;
        if !self.node.is_empty() {
            struct_ser.serialize_field("node", &self.node)?;
        }
        if self.since_revision != 0 {
            #[allow(clippy::needless_borrow)]
            #[allow(clippy::needless_borrows_for_generic_args)]
            struct_ser.serialize_field("sinceRevision", ToString::to_string(&self.since_revision).as_str())?;
        }
        if self.since_instance != 0 {
            #[allow(clippy::needless_borrow)]
            #[allow(clippy::needless_borrows_for_generic_args)]
            struct_ser.serialize_field("sinceInstance", ToString::to_string(&self.since_instance).as_str())?;
        }
        if !self.since_digest.is_empty() {
            #[allow(clippy::needless_borrow)]
            #[allow(clippy::needless_borrows_for_generic_args)]
            struct_ser.serialize_field("sinceDigest", pbjson::private::base64::encode(&self.since_digest).as_str())?;
        }
        if self.endpoint_columns {
            struct_ser.serialize_field("endpointColumns", &self.endpoint_columns)?;
        }
        if self.summarizes {
            struct_ser.serialize_field("summarizes", &self.summarizes)?;
        }
        if let Some(v) = self.since_summary.as_ref() {
            struct_ser.serialize_field("sinceSummary", v)?;
        }
        if self.unavailable_unless_synced {
            struct_ser.serialize_field("unavailableUnlessSynced", &self.unavailable_unless_synced)?;
        }
        struct_ser.end()
    }
}
impl<'de> serde::Deserialize<'de> for WatchRequest {
    #[allow(deprecated)]
    fn deserialize<D>(deserializer: D) -> std::result::Result<Self, D::Error>
    where
        D: serde::Deserializer<'de>,
    {
        const FIELDS: &[&str] = &[
            "node",
            "since_revision",
            "sinceRevision",
            "since_instance",
            "sinceInstance",
            "since_digest",
            "sinceDigest",
            "endpoint_columns",
            "endpointColumns",
            "summarizes",
            "since_summary",
            "sinceSummary",
            "unavailable_unless_synced",
            "unavailableUnlessSynced",
        ];

        #[allow(clippy::enum_variant_names)]
        enum GeneratedField {
            Node,
            SinceRevision,
            SinceInstance,
            SinceDigest,
            EndpointColumns,
            Summarizes,
            SinceSummary,
            UnavailableUnlessSynced,
        }
        impl<'de> serde::Deserialize<'de> for GeneratedField {
            fn deserialize<D>(deserializer: D) -> std::result::Result<GeneratedField, D::Error>
            where
                D: serde::Deserializer<'de>,
            {
                struct GeneratedVisitor;

                impl serde::de::Visitor<'_> for GeneratedVisitor {
                    type Value = GeneratedField;

                    fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                        write!(formatter, "expected one of: {:?}", &FIELDS)
                    }

                    #[allow(unused_variables)]
                    fn visit_str<E>(self, value: &str) -> std::result::Result<GeneratedField, E>
                    where
                        E: serde::de::Error,
                    {
                        match value {
                            "node" => Ok(GeneratedField::Node),
                            "sinceRevision" | "since_revision" => Ok(GeneratedField::SinceRevision),
                            "sinceInstance" | "since_instance" => Ok(GeneratedField::SinceInstance),
                            "sinceDigest" | "since_digest" => Ok(GeneratedField::SinceDigest),
                            "endpointColumns" | "endpoint_columns" => Ok(GeneratedField::EndpointColumns),
                            "summarizes" => Ok(GeneratedField::Summarizes),
                            "sinceSummary" | "since_summary" => Ok(GeneratedField::SinceSummary),
                            "unavailableUnlessSynced" | "unavailable_unless_synced" => Ok(GeneratedField::UnavailableUnlessSynced),
                            _ => Err(serde::de::Error::unknown_field(value, FIELDS)),
                        }
                    }
                }
                deserializer.deserialize_identifier(GeneratedVisitor)
            }
        }
        struct GeneratedVisitor;
        impl<'de> serde::de::Visitor<'de> for GeneratedVisitor {
            type Value = WatchRequest;

            fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                formatter.write_str("struct kpng.model.v1.WatchRequest")
            }

            fn visit_map<V>(self, mut map_: V) -> std::result::Result<WatchRequest, V::Error>
                where
                    V: serde::de::MapAccess<'de>,
            {
                let mut node__ = None;
                let mut since_revision__ = None;
                let mut since_instance__ = None;
                let mut since_digest__ = None;
                let mut endpoint_columns__ = None;
                let mut summarizes__ = None;
                let mut since_summary__ = None;
                let mut unavailable_unless_synced__ = None;
                while let Some(k) = map_.next_key()? {
                    match k {
                        GeneratedField::Node => {
                            if node__.is_some() {
                                return Err(serde::de::Error::duplicate_field("node"));
                            }
                            node__ = Some(map_.next_value()?);
                        }
                        GeneratedField::SinceRevision => {
                            if since_revision__.is_some() {
                                return Err(serde::de::Error::duplicate_field("sinceRevision"));
                            }
                            since_revision__ = 
                                Some(map_.next_value::<::pbjson::private::NumberDeserialize<_>>()?.0)
                            ;
                        }
                        GeneratedField::SinceInstance => {
                            if since_instance__.is_some() {
                                return Err(serde::de::Error::duplicate_field("sinceInstance"));
                            }
                            since_instance__ = 
                                Some(map_.next_value::<::pbjson::private::NumberDeserialize<_>>()?.0)
                            ;
                        }
                        GeneratedField::SinceDigest => {
                            if since_digest__.is_some() {
                                return Err(serde::de::Error::duplicate_field("sinceDigest"));
                            }
                            since_digest__ = 
                                Some(map_.next_value::<::pbjson::private::BytesDeserialize<_>>()?.0)
                            ;
                        }
                        GeneratedField::EndpointColumns => {
                            if endpoint_columns__.is_some() {
                                return Err(serde::de::Error::duplicate_field("endpointColumns"));
                            }
                            endpoint_columns__ = Some(map_.next_value()?);
                        }
                        GeneratedField::Summarizes => {
                            if summarizes__.is_some() {
                                return Err(serde::de::Error::duplicate_field("summarizes"));
                            }
                            summarizes__ = Some(map_.next_value()?);
                        }
                        GeneratedField::SinceSummary => {
                            if since_summary__.is_some() {
                                return Err(serde::de::Error::duplicate_field("sinceSummary"));
                            }
                            since_summary__ = map_.next_value()?;
                        }
                        GeneratedField::UnavailableUnlessSynced => {
                            if unavailable_unless_synced__.is_some() {
                                return Err(serde::de::Error::duplicate_field("unavailableUnlessSynced"));
                            }
                            unavailable_unless_synced__ = Some(map_.next_value()?);
                        }
                    }
                }
                Ok(WatchRequest {
                    node: node__.unwrap_or_default(),
                    since_revision: since_revision__.unwrap_or_default(),
                    since_instance: since_instance__.unwrap_or_default(),
                    since_digest: since_digest__.unwrap_or_default(),
                    endpoint_columns: endpoint_columns__.unwrap_or_default(),
                    summarizes: summarizes__.unwrap_or_default(),
                    since_summary: since_summary__,
                    unavailable_unless_synced: unavailable_unless_synced__.unwrap_or_default(),
                })
            }
        }
        deserializer.deserialize_struct("kpng.model.v1.WatchRequest", FIELDS, GeneratedVisitor)
    }
}
